/* The driver's process checkpoint API (cuCheckpointProcess*), emulated with
 * one state file per target process, so that a controller's orchestration
 * (which calls these on ANOTHER process's pid) runs on a CPU.
 *
 * The state of process <pid> is the file <dir>/<pid>, where <dir> is
 * FAKE_CUDA_CKPT_DIR, or /tmp/fake-cuda-ckpt-<uid> when that is unset (the
 * controller creates the directory, mode 0700). No file means RUNNING.
 * Content (see README.md):
 *
 *     locked\n                         after cuCheckpointProcessLock
 *     checkpointed\n                   after cuCheckpointProcessCheckpoint
 *     locked\npairs[ OLD:NEW]...\n     after cuCheckpointProcessRestore
 *
 * OLD and NEW are the 16 UUID bytes as 32 lowercase hex digits, in the order
 * the gpuPairs array gave them; a restore in place writes "pairs" alone.
 * cuCheckpointProcessUnlock deletes the file. A first line that is neither
 * word reads as CU_PROCESS_STATE_FAILED.
 *
 * Transitions, as in the real driver: lock RUNNING->LOCKED, checkpoint
 * LOCKED->CHECKPOINTED, restore CHECKPOINTED->LOCKED, unlock LOCKED->RUNNING;
 * from any other state CUDA_ERROR_ILLEGAL_STATE and nothing changes. A pid
 * <= 0 or one that does not exist (kill(pid, 0) gives ESRCH) is
 * CUDA_ERROR_INVALID_VALUE (and a stale state file of a dead pid is
 * removed). Nonzero reserved fields are CUDA_ERROR_INVALID_VALUE; the lock
 * timeout is ignored. Restore with gpuPairsCount > 0 needs a permutation of
 * all FAKE_CUDA_DEVICES devices (each fake UUID once as old, once as new);
 * anything else is CUDA_ERROR_INVALID_VALUE and the target stays
 * CHECKPOINTED, as measured on real H200s.
 *
 * Writers (controllers, in any process) serialize on flock(<dir>/.lock) and
 * replace the state file by rename, so a reader never sees a partial file.
 *
 * The driver's copy (FAKE_CUDA_DRIVER_COPY_MB=N in the target): the real
 * driver copies a process's device state into host memory it maps in that
 * process, and its checkpoint returns once the copy is done. The target's
 * copier thread (started at cuInit; it marks itself with <dir>/<pid>.copier)
 * maps N MiB when its state becomes CHECKPOINTED, writes one page in four
 * with a pattern and the others with zeros, and says <dir>/<pid>.copied;
 * beside it, as the real driver does, it reserves 8 MiB without access;
 * cuCheckpointProcessCheckpoint waits for that (10 s at most). Once the
 * state leaves CHECKPOINTED, the copier checks every page (a dropped zero
 * page reads as zero), then unlinks .copied, which the restore waits for;
 * when one differs it ends the process with status 70 and a line on
 * stderr, and the restore fails, as a driver restoring damaged state would.
 *
 * The target side (fake_ckpt_wait): with FAKE_CUDA_CKPT_BLOCK=1, every call
 * that needs cuInit first opens <dir>/<getpid()>; while it says LOCKED or
 * CHECKPOINTED the call polls it every 2 ms, like the real driver, which
 * blocks the API of a locked process. Unlike the real lock, taking the lock
 * does not wait for calls already past that check.
 */
#include "fake_internal.h"

/* The "old driver" build (-DFAKE_OLD_DRIVER, build/test/fake-old/) has no
 * process checkpoint API: like a driver before 570, it exports none of it. */
#ifdef FAKE_OLD_DRIVER
#define FAKE_CKPT_EXPORT __attribute__((visibility("hidden")))
#else
#define FAKE_CKPT_EXPORT FAKE_EXPORT
#endif

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STATE_LOCKED "locked"
#define STATE_CHECKPOINTED "checkpointed"
/* A state file is small: the state line plus at most 8 pairs of 65 chars. */
#define STATE_MAX 1024

/* ---- state files ---------------------------------------------------------- */

static int state_path(char *buf, size_t n, const char *dir, int pid, const char *prefix,
                      const char *suffix)
{
    if (!*dir)
        return -ENAMETOOLONG;
    int r = snprintf(buf, n, "%s/%s%d%s", dir, prefix, pid, suffix);
    return r < 0 || (size_t)r >= n ? -ENAMETOOLONG : 0;
}

/* 0 and *st from the file at path (RUNNING when it does not exist), or
 * -errno. */
static int read_state(const char *path, CUprocessState *st)
{
    char buf[STATE_MAX];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno != ENOENT)
            return -errno;
        *st = CU_PROCESS_STATE_RUNNING;
        return 0;
    }
    size_t len = 0;
    for (;;) {
        ssize_t r = read(fd, buf + len, sizeof(buf) - 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            return -e;
        }
        len += (size_t)r;
        if (r == 0 || len == sizeof(buf) - 1)
            break;
    }
    close(fd);
    buf[len] = '\0';
    size_t first = strcspn(buf, "\n");
    if (first == strlen(STATE_LOCKED) && memcmp(buf, STATE_LOCKED, first) == 0)
        *st = CU_PROCESS_STATE_LOCKED;
    else if (first == strlen(STATE_CHECKPOINTED) && memcmp(buf, STATE_CHECKPOINTED, first) == 0)
        *st = CU_PROCESS_STATE_CHECKPOINTED;
    else
        *st = CU_PROCESS_STATE_FAILED;
    return 0;
}

/* Replaces the state file of pid with content, atomically. Lock held. */
static int write_state(const char *dir, int pid, const char *content)
{
    char tmp[sizeof(fake_config()->ckpt_dir) + 32], path[sizeof(tmp)];
    int r = state_path(tmp, sizeof(tmp), dir, pid, ".", ".tmp");
    if (r == 0)
        r = state_path(path, sizeof(path), dir, pid, "", "");
    if (r)
        return r;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    size_t len = strlen(content), done = 0;
    while (done < len) {
        ssize_t w = write(fd, content + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            close(fd);
            unlink(tmp);
            return -e;
        }
        done += (size_t)w;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return -e;
    }
    return 0;
}

/* Creates dir (0700) when missing; an existing one must be a directory
 * owned by us. */
static int ensure_dir(const char *dir)
{
    if (!*dir)
        return -ENAMETOOLONG;
    if (mkdir(dir, 0700) == 0)
        return chmod(dir, 0700) == 0 ? 0 : -errno;
    if (errno != EEXIST)
        return -errno;
    struct stat sb;
    if (lstat(dir, &sb) != 0)
        return -errno;
    if (!S_ISDIR(sb.st_mode))
        return -ENOTDIR;
    if (sb.st_uid != geteuid())
        return -EPERM;
    return 0;
}

/* The writers' lock: an fd holding flock(<dir>/.lock), or -errno. */
static int dir_lock(const char *dir)
{
    char path[sizeof(fake_config()->ckpt_dir) + 16];
    int r = snprintf(path, sizeof(path), "%s/.lock", dir);
    if (r < 0 || (size_t)r >= sizeof(path))
        return -ENAMETOOLONG;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            int e = errno;
            close(fd);
            return -e;
        }
    }
    return fd;
}

static void dir_unlock(int fd)
{
    close(fd); /* drops the flock */
}

/* ---- the transitions ------------------------------------------------------ */

/* 1 when pid names a live process (ours or not), 0 when it does not exist. */
static int pid_alive(int pid)
{
    if (pid <= 0)
        return 0;
    return kill(pid, 0) == 0 || errno != ESRCH;
}

#define ANY_STATE (-1)

/* The one path of every call: checks pid, takes the lock, reads the state
 * into *out (when out), and when it is from (or from is ANY_STATE) deletes
 * the file (remove_file) or writes content (when not NULL). */
static CUresult transition(int pid, int from, const char *content, int remove_file,
                           CUprocessState *out)
{
    const char *dir = fake_config()->ckpt_dir;
    char path[sizeof(fake_config()->ckpt_dir) + 32];
    if (pid <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (state_path(path, sizeof(path), dir, pid, "", "") != 0 || ensure_dir(dir) != 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    int lk = dir_lock(dir);
    if (lk < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    CUresult res = CUDA_SUCCESS;
    CUprocessState st;
    if (!pid_alive(pid)) {
        unlink(path); /* a dead process's stale state */
        res = CUDA_ERROR_INVALID_VALUE;
    } else if (read_state(path, &st) != 0) {
        res = CUDA_ERROR_OPERATING_SYSTEM;
    } else {
        if (out)
            *out = st;
        if (from != ANY_STATE && (int)st != from)
            res = CUDA_ERROR_ILLEGAL_STATE;
        else if (remove_file && unlink(path) != 0)
            res = CUDA_ERROR_OPERATING_SYSTEM;
        else if (content && write_state(dir, pid, content) != 0)
            res = CUDA_ERROR_OPERATING_SYSTEM;
    }
    dir_unlock(lk);
    return res;
}

static int all_zero(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

/* The device whose fake UUID this is ('F','A','K','E',N,0...), or -1. */
static int uuid_device(const CUuuid *u)
{
    if (memcmp(u->bytes, "FAKE", 4) != 0 || !all_zero(u->bytes + 5, sizeof(u->bytes) - 5))
        return -1;
    int dev = (unsigned char)u->bytes[4];
    return dev < fake_config()->ndev ? dev : -1;
}

static void uuid_hex(char *out, const CUuuid *u)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof(u->bytes); i++) {
        unsigned char b = (unsigned char)u->bytes[i];
        out[2 * i] = digits[b >> 4];
        out[2 * i + 1] = digits[b & 15];
    }
    out[2 * sizeof(u->bytes)] = '\0';
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Waits (10 s at most) until <dir>/<pid>.copied is there (present) or
 * gone: the copier's word that it wrote, or checked, the copy. */
static CUresult wait_copied(int pid, bool present)
{
    char copied[sizeof(fake_config()->ckpt_dir) + 32];
    if (state_path(copied, sizeof(copied), fake_config()->ckpt_dir, pid, "", ".copied") != 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    for (int i = 0; i < 5000; i++) {
        if ((access(copied, F_OK) == 0) == present)
            return CUDA_SUCCESS;
        if (!pid_alive(pid))
            return present ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_UNKNOWN;
        sleep_ms(2);
    }
    return CUDA_ERROR_UNKNOWN;
}

/* A target with a copier: its checkpoint is done once the copy is. */
static CUresult copy_done(int pid)
{
    char copier[sizeof(fake_config()->ckpt_dir) + 32];
    if (state_path(copier, sizeof(copier), fake_config()->ckpt_dir, pid, "", ".copier") != 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    return access(copier, F_OK) == 0 ? wait_copied(pid, true) : CUDA_SUCCESS;
}

/* ---- the API ---------------------------------------------------------------- */

FAKE_CKPT_EXPORT CUresult cuCheckpointProcessGetState(int pid, CUprocessState *state)
{
    FAKE_ENTER_NOWAIT();
    if (!state)
        return CUDA_ERROR_INVALID_VALUE;
    return transition(pid, ANY_STATE, NULL, 0, state);
}
FAKE_LOCAL_ALIAS(cuCheckpointProcessGetState)

FAKE_CKPT_EXPORT CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args)
{
    FAKE_ENTER_NOWAIT();
    /* timeoutMs is accepted and ignored: locking never waits here. */
    if (args && (args->reserved0 || !all_zero(args->reserved1, sizeof(args->reserved1))))
        return CUDA_ERROR_INVALID_VALUE;
    return transition(pid, CU_PROCESS_STATE_RUNNING, STATE_LOCKED "\n", 0, NULL);
}
FAKE_LOCAL_ALIAS(cuCheckpointProcessLock)

FAKE_CKPT_EXPORT CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args)
{
    FAKE_ENTER_NOWAIT();
    if (args && !all_zero(args->reserved, sizeof(args->reserved)))
        return CUDA_ERROR_INVALID_VALUE;
    /* The fake libnccl marks a process holding communicators (its peers'
     * memory mapped): the real driver cannot take such a process. */
    char peers[sizeof(fake_config()->ckpt_dir) + 32];
    if (state_path(peers, sizeof(peers), fake_config()->ckpt_dir, pid, "", ".peers") == 0 && access(peers, F_OK) == 0)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult res = transition(pid, CU_PROCESS_STATE_LOCKED, STATE_CHECKPOINTED "\n", 0, NULL);
    return res == CUDA_SUCCESS ? copy_done(pid) : res;
}
FAKE_LOCAL_ALIAS(cuCheckpointProcessCheckpoint)

FAKE_CKPT_EXPORT CUresult cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args)
{
    FAKE_ENTER_NOWAIT();
    /* "locked\npairs" + " OLD:NEW" per device + "\n" */
    char content[sizeof(STATE_LOCKED) + 8 + FAKE_MAX_DEVICES * 66 + 2];
    size_t len = (size_t)snprintf(content, sizeof(content), "%s\npairs", STATE_LOCKED);
    if (args) {
        if (!all_zero(args->reserved, sizeof(args->reserved)) || args->reserved1)
            return CUDA_ERROR_INVALID_VALUE;
        unsigned count = args->gpuPairsCount;
        if (count > 0) {
            /* Every device once as old and once as new: a permutation of
             * all of them, or the real driver refuses. */
            if (!args->gpuPairs || count != (unsigned)fake_config()->ndev)
                return CUDA_ERROR_INVALID_VALUE;
            unsigned seen_old = 0, seen_new = 0;
            for (unsigned i = 0; i < count; i++) {
                int o = uuid_device(&args->gpuPairs[i].oldUuid);
                int n = uuid_device(&args->gpuPairs[i].newUuid);
                if (o < 0 || n < 0 || (seen_old & (1u << o)) || (seen_new & (1u << n)))
                    return CUDA_ERROR_INVALID_VALUE;
                seen_old |= 1u << o;
                seen_new |= 1u << n;
                char oh[33], nh[33];
                uuid_hex(oh, &args->gpuPairs[i].oldUuid);
                uuid_hex(nh, &args->gpuPairs[i].newUuid);
                len += (size_t)snprintf(content + len, sizeof(content) - len, " %s:%s", oh, nh);
            }
        }
    }
    snprintf(content + len, sizeof(content) - len, "\n");
    CUresult res = transition(pid, CU_PROCESS_STATE_CHECKPOINTED, content, 0, NULL);
    /* Done once the copier checked the copy (it unlinks .copied), or failed with the target it ended. */
    return res == CUDA_SUCCESS ? wait_copied(pid, false) : res;
}
FAKE_LOCAL_ALIAS(cuCheckpointProcessRestore)

FAKE_CKPT_EXPORT CUresult cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args)
{
    FAKE_ENTER_NOWAIT();
    if (args && !all_zero(args->reserved, sizeof(args->reserved)))
        return CUDA_ERROR_INVALID_VALUE;
    return transition(pid, CU_PROCESS_STATE_LOCKED, NULL, 1, NULL);
}
FAKE_LOCAL_ALIAS(cuCheckpointProcessUnlock)

/* There is no restore thread in the fake. */
FAKE_CKPT_EXPORT CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int *tid)
{
    FAKE_ENTER_NOWAIT();
    if (!tid || !pid_alive(pid))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_ERROR_NOT_SUPPORTED;
}
FAKE_LOCAL_ALIAS(cuCheckpointProcessGetRestoreThreadId)

/* ---- the target side ---------------------------------------------------------- */

/* This process as a controller outside its PID namespace names it (the
 * first of NSpid, where /proc is that namespace's), as the driver does. */
static int own_pid(void)
{
    static int pid, for_pid; /* again after a fork */
    if (for_pid == (int)getpid())
        return pid;
    pid = for_pid = (int)getpid();
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "NSpid:", 6)) {
            pid = atoi(line + 6);
            break;
        }
    if (f)
        fclose(f);
    return pid;
}

void fake_ckpt_wait(void)
{
    const char *dir = fake_config()->ckpt_dir;
    char path[sizeof(fake_config()->ckpt_dir) + 32];
    int saved = errno;
    if (state_path(path, sizeof(path), dir, own_pid(), "", "") == 0) {
        CUprocessState st;
        /* One open() per call while RUNNING (no file). */
        while (read_state(path, &st) == 0 &&
               (st == CU_PROCESS_STATE_LOCKED || st == CU_PROCESS_STATE_CHECKPOINTED)) {
            struct timespec ts = { 0, 2 * 1000000L };
            nanosleep(&ts, NULL);
        }
    }
    errno = saved;
}

/* ---- the driver's copy ---------------------------------------------------- */

#define COPY_PAGE 4096ul

/* Word w of page i of the copy: a pattern on one page in four of the
 * first `patterned` pages, else zero (the rest are the contexts' stacks). */
static uint64_t copy_word(size_t i, size_t w, size_t patterned)
{
    return i % 4 || i >= patterned ? 0 : ((uint64_t)i << 20 | w) + 1;
}

/* Every page written, as the driver writes its copy: zeros are resident. */
static void copy_fill(uint64_t *p, size_t pages, size_t patterned)
{
    for (size_t i = 0; i < pages; i++)
        for (size_t w = 0; w < COPY_PAGE / 8; w++)
            p[i * (COPY_PAGE / 8) + w] = copy_word(i, w, patterned);
}

/* The first page that differs from the pattern, or pages. */
static size_t copy_check(const uint64_t *p, size_t pages, size_t patterned)
{
    for (size_t i = 0; i < pages; i++)
        for (size_t w = 0; w < COPY_PAGE / 8; w++)
            if (p[i * (COPY_PAGE / 8) + w] != copy_word(i, w, patterned))
                return i;
    return pages;
}

static void *copier(void *arg)
{
    (void)arg;
    const char *dir = fake_config()->ckpt_dir;
    const size_t patterned = ((size_t)fake_config()->driver_copy_mb << 20) / COPY_PAGE;
    size_t len = 0, pages = 0;
    char state[sizeof(fake_config()->ckpt_dir) + 32], copied[sizeof(state)];
    if (state_path(state, sizeof(state), dir, own_pid(), "", "") != 0 ||
        state_path(copied, sizeof(copied), dir, own_pid(), "", ".copied") != 0)
        return NULL;
    uint64_t *copy = NULL;
    void *reserved = MAP_FAILED;
    for (;;) {
        CUprocessState st;
        if (read_state(state, &st) == 0) {
            if (st == CU_PROCESS_STATE_CHECKPOINTED && !copy) {
                /* The stacks are read as the checkpoint is taken: after the shim lowered them. */
                pages = patterned + (fake_ctx_stack_bytes() + COPY_PAGE - 1) / COPY_PAGE;
                len = pages * COPY_PAGE;
                reserved = mmap(NULL, 8ul << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (p != MAP_FAILED) {
                    copy = p;
                    copy_fill(copy, pages, patterned);
                    int fd = open(copied, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
                    if (fd >= 0)
                        close(fd);
                }
            } else if (st != CU_PROCESS_STATE_CHECKPOINTED && copy) {
                size_t bad = copy_check(copy, pages, patterned);
                if (bad < pages) {
                    fprintf(stderr, "fake-cuda: the driver's copy differs at page %zu of %zu\n", bad, pages);
                    _exit(70);
                }
                munmap(copy, len);
                copy = NULL;
                if (reserved != MAP_FAILED)
                    munmap(reserved, 8ul << 20);
                reserved = MAP_FAILED;
                unlink(copied);
            }
        }
        sleep_ms(2);
    }
    return NULL;
}

void fake_ckpt_copier_start(void)
{
    char marker[sizeof(fake_config()->ckpt_dir) + 32];
    if (ensure_dir(fake_config()->ckpt_dir) != 0 ||
        state_path(marker, sizeof(marker), fake_config()->ckpt_dir, own_pid(), "", ".copier") != 0)
        return;
    int fd = open(marker, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    close(fd);
    pthread_t t;
    if (pthread_create(&t, NULL, copier, NULL) == 0)
        pthread_detach(t);
}
