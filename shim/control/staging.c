#define _GNU_SOURCE
#include "staging.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "../interpose/contexts.h"
#include "../interpose/gate.h"
#include "../interpose/log.h"
#include "../interpose/real_driver.h"
#include "../interpose/shim.h"
#include "address_reserve.h"
#include "page_drop.h"
#include "bounce.h"
#include "detached.h"
#include "prefault.h"
#include "spare_memory.h"

/* Sixteen: the memfds fault in one thread each at a time (16 GiB as one
 * memfd: 2.7 s from any number of threads; as 16 or 32 memfds from as
 * many threads: 0.81 s or 0.44 s, on an H200 host), and pinning stays
 * serial in the driver (0.41-0.45 s). Eight had measured best for private
 * memory (28 GB/s, sixteen 24 GB/s), which goes through the bounce ring now. */
#define MAX_WORKERS 16
/* Files of huge pages fault in several times faster, and there more
 * threads only contend: 4.75 GiB by 8 threads in 0.20 s against 0.24-0.27
 * s by 16; two processes at once (a 2-rank job) 0.27-0.29 s against
 * 0.31-0.85 s, and 0.53-0.67 s beside 15 busy threads each
 * (test/gpu/probes/staging_pair.c, 2x H200, 32 cores). */
#define HUGE_PAGE_WORKERS 8
#define PAGE 4096u
/* By default a piece is a memfd, so no two threads fault in one file; but
 * at most this, so a copy into large files (staging past 62.5 GiB, or one
 * memfd for an application short of fds) never waits for a whole file. */
#define MAX_DEFAULT_PIECE (256ull << 20)

enum piece_state { PIECE_PENDING, PIECE_TAKEN, PIECE_READY };

struct gp_staging_prep {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    uint8_t *base;
    uint64_t size;
    uint64_t piece;     /* bytes per piece */
    uint32_t pieces;
    uint32_t next;      /* the next piece a worker takes */
    bool populate;      /* fault the pages in (new memory), or only pin (held memory) */
    bool go;            /* every worker is started */
    bool stop;
    int device;
    uint8_t *state;     /* enum piece_state, per piece */
    bool *pinned;       /* per piece */
    int workers;
    uint32_t most_workers; /* MAX_WORKERS, or HUGE_PAGE_WORKERS */
    pthread_t threads[MAX_WORKERS];
};

/* Bytes of the unit-sized part at off of total bytes (the last one shorter). */
static uint64_t part_at(uint64_t total, uint64_t off, uint64_t unit)
{
    return total - off < unit ? total - off : unit;
}

static uint64_t piece_len(const struct gp_staging_prep *p, uint32_t i)
{
    return part_at(p->size, (uint64_t)i * p->piece, p->piece);
}

/* Workers start together: a thread's stack is mapped under the process's
 * mmap lock, which faulting in and pinning hold for whole pieces, so
 * starting the eighth worker waited 0.3 s behind the first seven. */
static void wait_for_go(struct gp_staging_prep *p)
{
    pthread_mutex_lock(&p->lock);
    while (!p->go)
        pthread_cond_wait(&p->changed, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

static void *prepare_pieces(void *arg)
{
    struct gp_staging_prep *p = arg;
    wait_for_go(p);
    CUresult cu = CUDA_SUCCESS;
    bool have_context = gp_contexts_use_primary(p->device, &cu) == 0;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        if (p->stop || p->next >= p->pieces) {
            pthread_mutex_unlock(&p->lock);
            return NULL;
        }
        uint32_t i = p->next++;
        p->state[i] = PIECE_TAKEN;
        pthread_mutex_unlock(&p->lock);

        uint8_t *at = p->base + (uint64_t)i * p->piece;
        uint64_t n = piece_len(p, i);
        if (p->populate)
            gp_populate(at, n); /* the controller may already be writing into pieces not reached yet */
        bool ok = have_context && GP_REAL(cuMemHostRegister_v2)(at, n, CU_MEMHOSTREGISTER_PORTABLE) == CUDA_SUCCESS;

        pthread_mutex_lock(&p->lock);
        p->pinned[i] = ok;
        p->state[i] = PIECE_READY;
        pthread_cond_broadcast(&p->changed);
        pthread_mutex_unlock(&p->lock);
    }
}

/* Prepares the pieces on up to most_workers threads (on this one when none starts). */
static void start_workers(struct gp_staging_prep *p)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    uint32_t n = p->pieces < p->most_workers ? p->pieces : p->most_workers;
    if (cpus > 0 && n > (uint32_t)cpus)
        n = (uint32_t)cpus;
    p->workers = 0;
    for (uint32_t i = 0; i < n; i++)
        if (pthread_create(&p->threads[p->workers], NULL, prepare_pieces, p) == 0)
            p->workers++;
    pthread_mutex_lock(&p->lock);
    p->go = true;
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->lock);
    if (!p->workers)
        prepare_pieces(p);
}

static void join_workers(struct gp_staging_prep *p)
{
    for (int i = 0; i < p->workers; i++)
        pthread_join(p->threads[i], NULL);
    p->workers = 0;
}

static int prep_start(struct gp_staging *s, int device, bool fault)
{
    uint64_t piece = gp_shim_config()->staging_piece;
    if (!piece)
        piece = s->file_bytes && s->file_bytes < MAX_DEFAULT_PIECE ? s->file_bytes : MAX_DEFAULT_PIECE;
    if (piece < PAGE)
        piece = PAGE;
    if ((s->size + piece - 1) / piece > UINT32_MAX)
        return -EINVAL;
    struct gp_staging_prep *p = calloc(1, sizeof(*p));
    uint32_t pieces = (uint32_t)((s->size + piece - 1) / piece);
    if (!p || !(p->state = calloc(pieces, 1)) || !(p->pinned = calloc(pieces, sizeof(bool)))) {
        if (p)
            free(p->state);
        free(p);
        return -ENOMEM;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->changed, NULL);
    p->base = s->base;
    p->size = s->size;
    p->piece = piece;
    p->pieces = pieces;
    p->populate = fault;
    p->most_workers = s->huge_pages ? HUGE_PAGE_WORKERS : MAX_WORKERS;
    p->device = device;
    /* Retained here, once, so the workers only make it current. */
    CUresult cu = CUDA_SUCCESS;
    if (device >= 0 && gp_contexts_use_primary(device, &cu)) /* -1: no GPU memory to copy, nothing to pin for */
        GP_WARN("staging", "no context on device %d (CUresult %d): copies go through pageable memory", device, (int)cu);
    s->prep = p;
    start_workers(p);
    GP_DEBUG("staging", "preparing %u pieces on %d threads%s", p->pieces, p->workers,
             s->huge_pages ? " (files of huge pages)" : "");
    return 0;
}

/* Stops the preparation and unpins every piece. On one thread: more do
 * not help (16 GiB: 0.29 s as one registration, 0.33 s as 64 pieces on one
 * thread, 0.31 s on 8), and the calling thread may be one the shim started,
 * so the context is made current first. */
static void prep_finish(struct gp_staging *s)
{
    struct gp_staging_prep *p = s->prep;
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_mutex_unlock(&p->lock);
    join_workers(p);
    uint32_t failed = 0;
    for (uint32_t i = 0; i < p->pieces; i++)
        failed += p->state[i] == PIECE_READY && !p->pinned[i];
    if (failed && p->device >= 0)
        GP_WARN("staging", "%u of %u pieces of staging could not be pinned: their copies went through pageable memory",
                failed, p->pieces);
    CUresult cu = CUDA_SUCCESS;
    gp_contexts_use_primary(p->device, &cu);
    for (uint32_t i = 0; i < p->pieces; i++)
        if (p->pinned[i])
            GP_REAL(cuMemHostUnregister)(p->base + (uint64_t)i * p->piece);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->changed);
    free(p->state);
    free(p->pinned);
    free(p);
    s->prep = NULL;
}

/* A quarter of the cores: the checks, the quiesce and the digests run
 * meanwhile, and with every core but one faulting in (16 GiB pool, 32
 * cores, H200 host) the digests behind them took 0.068 s instead of 0.034. */
static int prefault_threads(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus >= 8 ? (int)(cpus / 4) : 1;
}

/* The bounce ring, or where it cannot be had, the pinning preparation. */
static int bounce_or_prep(struct gp_staging *s, int device, bool fault)
{
    int err = gp_bounce_create(device, &s->bounce);
    if (!err)
        return 0;
    GP_WARN("staging", "no bounce ring (%s): pinning the staging itself", strerror(-err));
    return prep_start(s, device, fault);
}

uint64_t gp_staging_ready(struct gp_staging *s, uint64_t offset)
{
    struct gp_staging_prep *p = s->prep;
    if (!p || offset >= s->size)
        return s->size;
    uint64_t end = (offset / p->piece + 1) * p->piece;
    if (end > s->size)
        end = s->size;
    uint32_t i = (uint32_t)(offset / p->piece);
    pthread_mutex_lock(&p->lock);
    /* A piece no worker will take any more (preparation stopped) is not waited for. */
    while (p->state[i] != PIECE_READY && !(p->stop && p->state[i] == PIECE_PENDING))
        pthread_cond_wait(&p->changed, &p->lock);
    pthread_mutex_unlock(&p->lock);
    return end;
}

void gp_staging_wait_all(struct gp_staging *s)
{
    if (s->prep)
        join_workers(s->prep); /* workers end once every piece is taken and done */
}

/* Bytes per memfd: GPUCKPT_STAGING_FILE (32 MiB, a preparation piece
 * each, by default), more when that would take more than
 * GPCK_MAX_STAGING_FILES; whole 2 MiB, so whole pages of any size. */
static uint64_t file_bytes_for(uint64_t size)
{
    const uint64_t align = 2ull << 20;
    uint64_t least = gp_shim_config()->staging_file;
    uint64_t per = (size + GPCK_MAX_STAGING_FILES - 1) / GPCK_MAX_STAGING_FILES;
    per = per > least ? per : least;
    return (per + align - 1) / align * align;
}

void gp_staging_close_files(struct gp_staging *s)
{
    for (uint32_t i = 0; i < s->nfds; i++)
        close(s->fds[i]);
    s->nfds = 0;
}

/* Maps size bytes of files of file_bytes end to end at one reserved range:
 * the given fds, or (given NULL) new memfds, kept in s->fds until sent. */
static int map_files(struct gp_staging *s, uint64_t size, uint64_t file_bytes, const int *given)
{
    void *p = gp_reserve_aligned(size, 0);
    if (p == MAP_FAILED)
        return -errno;
    *s = (struct gp_staging){ .base = p, .size = size, .file_bytes = file_bytes };
    for (uint64_t off = 0; off < size; off += s->file_bytes) {
        uint64_t n = part_at(size, off, file_bytes);
        int fd = given ? given[off / file_bytes] : memfd_create("gpuckpt-staging", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (!given && fd >= 0)
            s->fds[s->nfds++] = fd;
        /* Sealed as GPCK_STAGING_GIVEN asks: a suspend's staging kept by the
         * snapshot holder comes back to this shim that way. */
        if (fd < 0 || (!given && (ftruncate(fd, (off_t)n) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)) ||
            mmap(s->base + off, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
            int err = -errno;
            gp_staging_close_files(s);
            munmap(p, size);
            *s = (struct gp_staging){ .nfds = 0 };
            return err;
        }
    }
    return 0;
}

/* Populated and pinned inside the application: a request beyond three
 * quarters of the host's memory would get the application killed by the
 * OOM killer, so it is refused. */
static int check_size(uint64_t size)
{
    uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    if (!size)
        return -EINVAL;
    return size > phys / 4 * 3 ? -ENOMEM : 0;
}

int gp_staging_create(uint64_t size, bool private_memory, int device, struct gp_staging *out)
{
    *out = (struct gp_staging){ .nfds = 0 };
    int err = check_size(size);
    if (err)
        return err;
    size = (size + PAGE - 1) / PAGE * PAGE;
    bool fresh = false;
    if (private_memory) {
        uint64_t mapped;
        void *p = gp_spare_take(size, &mapped, &fresh);
        if (!p)
            return -errno;
        *out = (struct gp_staging){ .base = p, .size = mapped, .anon = true };
    } else {
        uint64_t file_bytes = file_bytes_for(size);
        err = map_files(out, size, file_bytes, NULL);
        /* An application short of fds (they are closed once sent, but
         * open until then) still gets one memfd, slower to fault in. */
        if ((err == -EMFILE || err == -ENFILE) && file_bytes < size) {
            GP_WARN("staging", "no fds for %llu memfds: staging as one",
                    (unsigned long long)((size + file_bytes - 1) / file_bytes));
            err = map_files(out, size, size, NULL);
        }
        if (err)
            return err;
    }
    /* Only the shim touches private staging: it goes through the bounce
     * ring and is never pinned. */
    err = private_memory ? bounce_or_prep(out, device, true) : prep_start(out, device, true);
    if (err)
        gp_staging_destroy(out);
    else if (fresh && out->bounce)
        out->prefault = gp_prefault_start(out->base, out->size, prefault_threads());
    return err;
}

void gp_staging_copy_starts(struct gp_staging *s)
{
    gp_prefault_end(s->prefault, false);
    s->prefault = NULL;
}

/* A file that can never be sealed (F_SEAL_SEAL from its making), on a
 * tmpfs, that no path reaches: the controller's staging on huge pages,
 * unlinked as made, which only the holders of its fds (the controller, the
 * snapshot holder) could shrink. A memfd made to be sealed but left
 * unsealed is still refused. */
static bool unsealable_unlinked_tmpfs(int fd, const struct stat *st, int seals)
{
    struct statfs fs;
    return seals == F_SEAL_SEAL && st->st_nlink == 0 && fstatfs(fd, &fs) == 0 && fs.f_type == TMPFS_MAGIC;
}

/* Each given file is a regular file that cannot shrink under the mapping
 * (sealed, or unsealable and unlinked on a tmpfs) and holds its part: what
 * the protocol header asks of GPCK_STAGING_GIVEN. *huge_pages is cleared
 * unless every file is on huge pages (a tmpfs's inode with huge pages
 * reports them as its block size). */
static int check_given(const int *fds, uint32_t nfds, uint64_t size, uint64_t file_bytes, bool *huge_pages)
{
    int err = check_size(size);
    if (err)
        return err;
    if (size % PAGE || !file_bytes || file_bytes % PAGE || nfds > GPCK_MAX_STAGING_FILES ||
        nfds != (size + file_bytes - 1) / file_bytes)
        return -EINVAL;
    for (uint32_t i = 0; i < nfds; i++) {
        uint64_t part = part_at(size, (uint64_t)i * file_bytes, file_bytes);
        struct stat st;
        int seals = fcntl(fds[i], F_GET_SEALS);
        if (fstat(fds[i], &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < part ||
            !((seals >= 0 && (seals & F_SEAL_SHRINK)) || unsealable_unlinked_tmpfs(fds[i], &st, seals))) {
            GP_WARN("staging", "refused the controller's staging: file %u of %u is not a file of %llu bytes sealed "
                    "against shrinking or unlinked on a tmpfs", i + 1, nfds, (unsigned long long)part);
            return -EINVAL;
        }
        if (st.st_blksize != (blksize_t)(2 << 20))
            *huge_pages = false;
    }
    return 0;
}

int gp_staging_take(const int *fds, uint32_t nfds, uint64_t size, uint64_t file_bytes, bool unpinned, int device,
                    struct gp_staging *out)
{
    *out = (struct gp_staging){ .nfds = 0 };
    bool huge_pages = true;
    int err = check_given(fds, nfds, size, file_bytes, &huge_pages);
    if (!err)
        err = map_files(out, size, file_bytes, fds);
    out->huge_pages = huge_pages;
    for (uint32_t i = 0; i < nfds; i++)
        close(fds[i]);
    if (!err)
        err = unpinned ? bounce_or_prep(out, device, true) : prep_start(out, device, true);
    if (err)
        gp_staging_destroy(out);
    return err;
}

int gp_staging_adopt(const struct gp_held *held, int device, struct gp_staging *out)
{
    /* A departed controller's borrow of this memory may still be unpinning it. */
    gp_staging_releases_wait();
    *out = (struct gp_staging){ .nfds = 0 };
    if (!held->base)
        return -ENOENT;
    *out = (struct gp_staging){ .base = held->base, .size = held->size, .borrowed = true, .anon = held->anon };
    int err = bounce_or_prep(out, device, false);
    if (err)
        gp_staging_destroy(out);
    return err;
}

void gp_staging_hold(struct gp_staging *s, struct gp_held *held)
{
    gp_held_drop(held);
    if (!s->base)
        return;
    gp_staging_unpin(s); /* none may fault it in once it is held */
    gp_staging_close_files(s);
    *held = (struct gp_held){ .base = s->base, .size = s->size, .anon = s->anon };
    *s = (struct gp_staging){ .nfds = 0 };
}

/* Private memory is kept for the next suspend (spare_memory.h); shared
 * memory's page table entries go from many threads first: a checkpoint's
 * CRIU dump waits for the drop of the held staging. */
static void unmap_or_keep(uint8_t *base, uint64_t size, bool anon)
{
    if (anon) {
        gp_spare_give(base, size);
    } else {
        gp_drop_pages_parallel(base, size);
        munmap(base, size);
    }
}

void gp_held_drop(struct gp_held *held)
{
    if (held->base)
        unmap_or_keep(held->base, held->size, held->anon);
    *held = (struct gp_held){ 0 };
}

void gp_staging_unpin(struct gp_staging *s)
{
    gp_staging_copy_starts(s); /* nothing faults it in any more */
    prep_finish(s);
    gp_bounce_destroy(s->bounce);
    s->bounce = NULL;
}

void gp_staging_destroy(struct gp_staging *s)
{
    if (!s->base)
        return;
    gp_staging_unpin(s);
    if (!s->borrowed)
        unmap_or_keep(s->base, s->size, s->anon);
    gp_staging_close_files(s);
    *s = (struct gp_staging){ .nfds = 0 };
}

struct release_job {
    struct gp_staging staging;
    struct gp_held held;
};

/* Release jobs still running: gp_staging_releases_wait waits for none. */
static pthread_mutex_t releases_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t releases_done = PTHREAD_COND_INITIALIZER;
static unsigned releases_running;

static void releases_add(int n)
{
    pthread_mutex_lock(&releases_lock);
    releases_running += (unsigned)n;
    if (!releases_running)
        pthread_cond_broadcast(&releases_done);
    pthread_mutex_unlock(&releases_lock);
}

static void *release_job_run(void *arg)
{
    struct release_job *j = arg;
    /* Timed: it runs while the application (and a restored job's NCCL rebuild) goes on. */
    uint64_t t0 = gp_now_ns(), bytes = j->staging.size + j->held.size;
    gp_staging_destroy(&j->staging);
    gp_held_drop(&j->held);
    GP_DEBUG("staging", "released %llu MiB on a thread of its own in %.3f s", (unsigned long long)(bytes >> 20),
             (double)(gp_now_ns() - t0) / 1e9);
    free(j);
    releases_add(-1);
    return NULL;
}

void gp_staging_release_later(struct gp_staging *s, struct gp_held *held)
{
    if (!s->base && !held->base)
        return;
    struct release_job *j = malloc(sizeof(*j));
    if (j)
        *j = (struct release_job){ .staging = *s, .held = *held };
    releases_add(1);
    if (j && gp_run_detached(release_job_run, j)) {
        *s = (struct gp_staging){ .nfds = 0 };
        *held = (struct gp_held){ 0 };
        return;
    }
    releases_add(-1);
    free(j);
    gp_staging_destroy(s);
    gp_held_drop(held);
}

void gp_staging_releases_wait(void)
{
    pthread_mutex_lock(&releases_lock);
    while (releases_running)
        pthread_cond_wait(&releases_done, &releases_lock);
    pthread_mutex_unlock(&releases_lock);
}
