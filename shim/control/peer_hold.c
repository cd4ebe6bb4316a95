/* A migrate's pool held in memory on another GPU: see peer_hold.h. */
#define _GNU_SOURCE
#include "peer_hold.h"

#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "../interpose/contexts.h"
#include "../interpose/driver_error.h"
#include "../interpose/log.h"
#include "../interpose/real_driver.h"
#include "../pool/pool.h"
#include "detached.h"

/* Room kept beyond the hold's own fds, for the application and the driver. */
#define FD_MARGIN 64

struct held_slice {
    int *fds;      /* one per chunk in use, in the pool's order */
    size_t count;  /* chunks in use when the hold started */
    size_t filled; /* fds[0, filled) are held */
};

static struct held_slice held[GP_POOL_MAX_DEVICES];

/* The last hold's chunks of each device, in address order: kept after the
 * fds go, until the next hold of that device (see peer_hold.h). */
struct hold_layout {
    uint64_t *addrs;
    size_t n;
};
static struct hold_layout last_hold[GP_POOL_MAX_DEVICES];

/* A device's mirror: the last hold's memory mapped in a range of its own,
 * chunk k at base + (addrs[k] - addrs[0]); handles[k] 0 where not mapped. */
struct mirror_slice {
    CUdeviceptr base;
    uint64_t span;
    CUmemGenericAllocationHandle *handles;
    size_t n;
};
static struct mirror_slice mirror[GP_POOL_MAX_DEVICES];
static void mirror_drop(int device);
/* The application's soft fd limit before gp_peer_make_room raised it (0:
 * not raised); put back once the held fds are closed, on whichever thread
 * closes them. */
static _Atomic rlim_t raised_from;

static long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -errno;
    long n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own */
}

static void restore_fd_limit(void)
{
    rlim_t before = atomic_exchange(&raised_from, 0);
    struct rlimit rl;
    if (before && getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = before;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int gp_peer_make_room(void)
{
    const struct gp_pool_config *cfg = gp_pool_config();
    if (!cfg)
        return -EINVAL;
    rlim_t need = 0;
    for (int d = 0; d < cfg->device_count; d++)
        need += gp_pool_chunks_in_use(d, NULL, 0);
    long open = open_fds();
    struct rlimit rl;
    if (open < 0)
        return (int)open;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -errno;
    /* Twice the chunks: the driver may keep an fd per imported handle while
     * the held fds are still open (the fake driver does). */
    rlim_t want = (rlim_t)open + 2 * need + FD_MARGIN;
    if (rl.rlim_cur >= want)
        return 0;
    if (rl.rlim_max < want)
        return -EMFILE;
    rlim_t before = rl.rlim_cur;
    rl.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -errno;
    rlim_t none = 0;
    atomic_compare_exchange_strong(&raised_from, &none, before); /* the first value is the application's */
    GP_INFO("peer", "raised the soft fd limit from %llu to %llu for a migrate's %llu chunks, until they are mapped",
            (unsigned long long)before, (unsigned long long)want, (unsigned long long)need);
    return 0;
}

static void drop_slice(struct held_slice *h)
{
    for (size_t i = 0; i < h->filled; i++)
        close(h->fds[i]);
    free(h->fds);
    *h = (struct held_slice){ 0 };
}

/* Readies h for the fds of chunks [first, first + count) of a hold of n
 * chunks: first 0 starts over; otherwise the hold must go on where it is,
 * over as many chunks as it began with (-EINVAL: out of order, or the pool
 * changed under it). */
static int slice_ready(struct held_slice *h, uint64_t first, uint32_t count, size_t n)
{
    if (first == 0)
        drop_slice(h);
    if (first != h->filled || (h->fds && h->count != n) || first + count > n)
        return -EINVAL;
    if (!h->fds) {
        h->fds = malloc(n * sizeof(*h->fds));
        if (!h->fds)
            return -ENOMEM;
        h->count = n;
    }
    return 0;
}

/* Holds fds after those h holds (slice_ready made room); returns how many it holds. */
static size_t slice_take(struct held_slice *h, const int *fds, uint32_t count)
{
    memcpy(h->fds + h->filled, fds, count * sizeof(*fds));
    h->filled += count;
    return h->filled;
}

/* Closes the fds of every device's slice in slices (held, or a copy of it). */
static void drop_slices(struct held_slice *slices)
{
    for (int d = 0; d < GP_POOL_MAX_DEVICES; d++)
        drop_slice(&slices[d]);
    restore_fd_limit();
}

void gp_peer_drop(void)
{
    drop_slices(held);
}

static void *drop_job_run(void *arg)
{
    drop_slices(arg);
    free(arg);
    return NULL;
}

/* gp_peer_drop on a thread of its own, once the memory is mapped: closing
 * the last exported fds is driver work the application need not wait for
 * (16 GiB remap, 2x H200: 0.140 s with the fds closed inline, 0.125 s
 * without). */
static void drop_later(void)
{
    struct held_slice *job = malloc(sizeof(held));
    if (job)
        memcpy(job, held, sizeof(held));
    if (job && gp_run_detached(drop_job_run, job)) {
        memset(held, 0, sizeof(held));
        return;
    }
    free(job);
    gp_peer_drop();
}

bool gp_peer_held_any(void)
{
    for (int d = 0; d < GP_POOL_MAX_DEVICES; d++)
        if (held[d].filled)
            return true;
    return false;
}

bool gp_peer_held_complete(void)
{
    const struct gp_pool_config *cfg = gp_pool_config();
    if (!cfg)
        return false;
    bool any = false;
    for (int d = 0; d < cfg->device_count; d++) {
        size_t n = gp_pool_chunks_in_use(d, NULL, 0);
        if (held[d].filled != n)
            return false;
        any |= n > 0;
    }
    return any;
}

/* Where the i-th of a set of chunks goes in a range at va: side by side
 * without addrs, else where addrs[i] lies relative to origin. */
static CUdeviceptr place_of(CUdeviceptr va, const uint64_t *addrs, uint64_t origin, size_t i)
{
    return va + (addrs ? addrs[i] - origin : i * gp_pool_config()->chunk_size);
}

/* Imports fds[0, n) and maps fds[i] at place_of(va, addrs, origin, i),
 * setting handles[i]; *mapped counts those mapped, which the caller unmaps
 * and releases (unmap_all) whatever the result. */
static CUresult import_at(CUdeviceptr va, const uint64_t *addrs, uint64_t origin, const int *fds, size_t n,
                          CUmemGenericAllocationHandle *handles, size_t *mapped)
{
    uint64_t cs = gp_pool_config()->chunk_size;
    CUresult r = CUDA_SUCCESS;
    for (*mapped = 0; r == CUDA_SUCCESS && *mapped < n;) {
        size_t i = *mapped;
        r = GP_CALL(cuMemImportFromShareableHandle, &handles[i], (void *)(intptr_t)fds[i],
                                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (r == CUDA_SUCCESS && (r = GP_CALL(cuMemMap, place_of(va, addrs, origin, i), cs, 0, handles[i], 0)) != CUDA_SUCCESS)
            GP_REAL(cuMemRelease)(handles[i]);
        if (r != CUDA_SUCCESS)
            handles[i] = 0; /* not mapped: unmap_all skips it */
        else
            (*mapped)++;
    }
    return r;
}

/* Undoes import_at for the n handles given (0 entries skipped). */
static void unmap_all(CUdeviceptr va, const uint64_t *addrs, uint64_t origin, CUmemGenericAllocationHandle *handles,
                      size_t n)
{
    uint64_t cs = gp_pool_config()->chunk_size;
    for (size_t i = 0; i < n; i++) {
        if (!handles[i])
            continue;
        GP_REAL(cuMemUnmap)(place_of(va, addrs, origin, i), cs);
        GP_REAL(cuMemRelease)(handles[i]);
        handles[i] = 0;
    }
}

/* Imports fds[0, n) side by side in a scratch range that device may use,
 * and copies between them and the pool's chunks at addrs: into the held
 * memory (to_held) or out of it. The imports go again afterwards; the fds
 * stay open. One copy per run of adjacent chunks, on a stream of its own. */
static int copy_chunks(int device, const uint64_t *addrs, const int *fds, size_t n, bool to_held, CUresult *cu_err)
{
    uint64_t cs = gp_pool_config()->chunk_size;
    int err = gp_contexts_use_primary(device, cu_err);
    if (err)
        return err;
    CUmemGenericAllocationHandle *handles = calloc(n, sizeof(*handles));
    if (!handles)
        return -ENOMEM;
    CUdeviceptr scratch = 0;
    CUstream stream = NULL;
    size_t mapped = 0;
    CUresult r = GP_CALL(cuMemAddressReserve, &scratch, n * cs, cs, 0, 0);
    if (r != CUDA_SUCCESS)
        scratch = 0;
    else
        r = import_at(scratch, NULL, 0, fds, n, handles, &mapped);
    CUmemAccessDesc access = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, device },
                               .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    if (r == CUDA_SUCCESS)
        r = GP_CALL(cuMemSetAccess, scratch, n * cs, &access, 1);
    if (r == CUDA_SUCCESS && (r = GP_CALL(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS)
        stream = NULL;
    for (size_t i = 0; r == CUDA_SUCCESS && i < n;) {
        size_t run = 1;
        while (i + run < n && addrs[i + run] == addrs[i] + run * cs)
            run++;
        CUdeviceptr other = scratch + i * cs;
        r = GP_CALL(cuMemcpyDtoDAsync_v2, to_held ? other : addrs[i], to_held ? addrs[i] : other, run * cs, stream);
        i += run;
    }
    if (stream) {
        CUresult s = GP_CALL(cuStreamSynchronize, stream);
        r = r == CUDA_SUCCESS ? s : r;
        GP_REAL(cuStreamDestroy_v2)(stream);
    }
    unmap_all(scratch, NULL, 0, handles, mapped);
    if (scratch)
        GP_REAL(cuMemAddressFree)(scratch, n * cs);
    free(handles);
    return r == CUDA_SUCCESS ? 0 : gp_cu_errno(r, cu_err);
}

int gp_peer_hold(int device, uint64_t first, const int *fds, uint32_t count, uint64_t *bytes, uint64_t *chunks_held,
                 CUresult *cu_err)
{
    const struct gp_pool_config *cfg = gp_pool_config();
    if (!cfg || device < 0 || device >= cfg->device_count || !count) {
        gp_peer_drop();
        return -EINVAL;
    }
    struct held_slice *h = &held[device];
    size_t n = gp_pool_chunks_in_use(device, NULL, 0);
    int err = slice_ready(h, first, count, n);
    uint64_t *addrs = err ? NULL : malloc(n * sizeof(*addrs));
    if (!err && !addrs)
        err = -ENOMEM;
    if (!err && gp_pool_chunks_in_use(device, addrs, n) != n)
        err = -EINVAL;
    if (!err)
        err = copy_chunks(device, addrs + first, fds, count, true, cu_err);
    if (err) {
        free(addrs);
        gp_peer_drop();
        return err;
    }
    if (first == 0) { /* a new hold of device: its layout replaces the last one's */
        mirror_drop(device);
        free(last_hold[device].addrs);
        last_hold[device] = (struct hold_layout){ addrs, n };
    } else {
        free(addrs);
    }
    *bytes = count * cfg->chunk_size;
    *chunks_held = slice_take(h, fds, count);
    return 0;
}

/* Chunks whose held memory lies on another GPU than theirs: the pool gives
 * them fresh memory at the remap, and they are copied into it afterwards. */
struct elsewhere {
    uint64_t *addrs;
    int *fds;
    size_t n;
};

static int chunk_from_held(int device, size_t k, uint64_t addr, CUmemGenericAllocationHandle *handle, void *arg,
                           CUresult *cu_err)
{
    struct elsewhere *e = (struct elsewhere *)arg + device;
    struct held_slice *h = &held[device];
    if (k >= h->filled)
        return -EINVAL;
    CUmemAllocationProp prop = { 0 };
    CUresult r = GP_CALL(cuMemImportFromShareableHandle, handle, (void *)(intptr_t)h->fds[k],
                                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS)
        return gp_cu_errno(r, cu_err);
    r = GP_REAL(cuMemGetAllocationPropertiesFromHandle)(&prop, *handle);
    if (r == CUDA_SUCCESS && prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE && prop.location.id == device)
        return 0; /* on the chunk's own GPU: mapped where it is */
    GP_REAL(cuMemRelease)(*handle);
    e->addrs[e->n] = addr;
    e->fds[e->n] = h->fds[k];
    e->n++;
    return GP_CHUNK_FRESH;
}

int gp_peer_remap(uint64_t *bytes_mapped, uint64_t *bytes_copied, CUresult *cu_err)
{
    struct elsewhere e[GP_POOL_MAX_DEVICES] = { 0 };
    int err = gp_peer_held_complete() ? 0 : -EINVAL;
    for (int d = 0; !err && d < GP_POOL_MAX_DEVICES; d++) {
        if (!held[d].count)
            continue;
        e[d].addrs = malloc(held[d].count * sizeof(*e[d].addrs));
        e[d].fds = malloc(held[d].count * sizeof(*e[d].fds));
        if (!e[d].addrs || !e[d].fds)
            err = -ENOMEM;
    }
    if (!err)
        err = gp_pool_remap_all_from(chunk_from_held, e, bytes_mapped, cu_err);
    *bytes_copied = 0;
    for (int d = 0; !err && d < GP_POOL_MAX_DEVICES; d++) {
        if (e[d].n)
            err = copy_chunks(d, e[d].addrs, e[d].fds, e[d].n, false, cu_err);
        *bytes_copied += e[d].n * gp_pool_config()->chunk_size;
    }
    for (int d = 0; d < GP_POOL_MAX_DEVICES; d++) {
        free(e[d].addrs);
        free(e[d].fds);
    }
    if (err) {
        uint64_t released;
        gp_pool_release_all(&released);
        *bytes_mapped = 0;
        return err;
    }
    drop_later();
    return 0;
}

/* The last hold of device, checked to cover chunks [first, first + count). */
static const struct hold_layout *last_hold_of(int device, uint64_t first, uint32_t count)
{
    const struct gp_pool_config *cfg = gp_pool_config();
    if (!cfg || device < 0 || device >= cfg->device_count || !count)
        return NULL;
    const struct hold_layout *l = &last_hold[device];
    return l->addrs && first < l->n && count <= l->n - first ? l : NULL;
}

int gp_peer_copy_in(int device, uint64_t first, const int *fds, uint32_t count, uint64_t *bytes, CUresult *cu_err)
{
    const struct hold_layout *l = last_hold_of(device, first, count);
    if (!l)
        return -EINVAL;
    /* The remap gives the chunks in use back at their addresses; anything
     * else is not the pool the hold copied. */
    uint64_t *now = malloc(l->n * sizeof(*now));
    if (!now)
        return -ENOMEM;
    bool same = gp_pool_chunks_in_use(device, now, l->n) == l->n && !memcmp(now, l->addrs, l->n * sizeof(*now));
    free(now);
    if (!same)
        return -ESTALE;
    int err = copy_chunks(device, l->addrs + first, fds, count, false, cu_err);
    *bytes = err ? 0 : count * gp_pool_config()->chunk_size;
    return err;
}

static void mirror_drop(int device)
{
    struct mirror_slice *m = &mirror[device];
    if (!m->base)
        return;
    CUresult unused;
    gp_contexts_use_primary(device, &unused);
    const struct hold_layout *l = &last_hold[device];
    unmap_all(m->base, l->addrs, l->addrs[0], m->handles, m->n);
    GP_REAL(cuMemAddressFree)(m->base, m->span);
    free(m->handles);
    *m = (struct mirror_slice){ 0 };
}

void gp_peer_mirror_drop(void)
{
    for (int d = 0; d < GP_POOL_MAX_DEVICES; d++)
        mirror_drop(d);
}

int gp_peer_mirror(int device, uint64_t first, const int *fds, uint32_t count, uint64_t *bytes, CUresult *cu_err)
{
    const struct hold_layout *l = last_hold_of(device, first, count);
    if (!l)
        return -EINVAL;
    struct mirror_slice *m = &mirror[device];
    uint64_t cs = gp_pool_config()->chunk_size;
    if (first == 0)
        mirror_drop(device);
    else if (!m->base || m->n != l->n)
        return -EINVAL;
    int err = gp_contexts_use_primary(device, cu_err);
    if (err)
        return err;
    CUresult r = CUDA_SUCCESS;
    if (!m->base) {
        m->n = l->n;
        m->span = l->addrs[l->n - 1] + cs - l->addrs[0];
        m->handles = calloc(l->n, sizeof(*m->handles));
        if (!m->handles) {
            *m = (struct mirror_slice){ 0 };
            return -ENOMEM;
        }
        r = GP_CALL(cuMemAddressReserve, &m->base, m->span, cs, 0, 0);
        if (r != CUDA_SUCCESS) {
            free(m->handles);
            *m = (struct mirror_slice){ 0 };
            return gp_cu_errno(r, cu_err);
        }
    }
    size_t mapped;
    r = import_at(m->base, l->addrs + first, l->addrs[0], fds, count, m->handles + first, &mapped);
    CUmemAccessDesc access = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, device },
                               .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    for (uint32_t i = 0; r == CUDA_SUCCESS && i < count; i++)
        r = GP_CALL(cuMemSetAccess, place_of(m->base, l->addrs + first, l->addrs[0], i), cs, &access, 1);
    if (r != CUDA_SUCCESS) {
        mirror_drop(device);
        return gp_cu_errno(r, cu_err);
    }
    *bytes = count * cs;
    return 0;
}

int gp_peer_mirror_at(int device, uint64_t addr, uint64_t len, uint64_t *at)
{
    if (device < 0 || device >= GP_POOL_MAX_DEVICES || !mirror[device].base || !len)
        return -EFAULT;
    const struct mirror_slice *m = &mirror[device];
    const struct hold_layout *l = &last_hold[device];
    uint64_t cs = gp_pool_config()->chunk_size;
    if (addr < l->addrs[0] || addr - l->addrs[0] >= m->span || len > m->span - (addr - l->addrs[0]))
        return -EFAULT;
    /* Every chunk the range touches must be one the mirror maps: the first
     * found by bisection (the addresses ascend), the rest adjacent to it. */
    uint64_t first = addr - (addr - l->addrs[0]) % cs;
    size_t lo = 0, hi = l->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (l->addrs[mid] < first)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t k = lo; first + (k - lo) * cs < addr + len; k++)
        if (k == l->n || l->addrs[k] != first + (k - lo) * cs || !m->handles[k])
            return -EFAULT;
    *at = m->base + (addr - l->addrs[0]);
    return 0;
}

int gp_peer_adopt(int device, uint64_t first, const int *fds, uint32_t count, uint64_t *chunks_held)
{
    const struct hold_layout *l = last_hold_of(device, first, count);
    if (!l)
        return -EINVAL;
    struct held_slice *h = &held[device];
    int err = slice_ready(h, first, count, l->n);
    if (err)
        return err;
    *chunks_held = slice_take(h, fds, count);
    return 0;
}
