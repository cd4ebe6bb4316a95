/* The anchor gpuckpt is measured against: the CUDA driver's own process
 * checkpoint API (what NVIDIA's cuda-checkpoint calls), applied to another
 * process. Locks, checkpoints (device memory out to host), restores and
 * unlocks PID, and prints one JSON line with the time of each step.
 *
 *   driver_ckpt PID            all four steps, timed
 *   driver_ckpt PID STEP       one step: lock, checkpoint, restore, unlock
 *                              (the anchor around a CRIU dump and restore)
 *
 * libcuda is loaded at run time so the program builds without a driver. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef CUresult (*lock_fn)(int, CUcheckpointLockArgs *);
typedef CUresult (*ckpt_fn)(int, CUcheckpointCheckpointArgs *);
typedef CUresult (*restore_fn)(int, CUcheckpointRestoreArgs *);
typedef CUresult (*unlock_fn)(int, CUcheckpointUnlockArgs *);

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int fail(const char *what, CUresult r)
{
    printf("{\"event\":\"error\",\"step\":\"%s\",\"cuResult\":%d}\n", what, (int)r);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: driver_ckpt PID [lock|checkpoint|restore|unlock]\n");
        return 2;
    }
    int pid = atoi(argv[1]);
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "driver_ckpt: %s\n", dlerror());
        return 2;
    }
    lock_fn lock = (lock_fn)dlsym(h, "cuCheckpointProcessLock");
    ckpt_fn ckpt = (ckpt_fn)dlsym(h, "cuCheckpointProcessCheckpoint");
    restore_fn restore = (restore_fn)dlsym(h, "cuCheckpointProcessRestore");
    unlock_fn unlock = (unlock_fn)dlsym(h, "cuCheckpointProcessUnlock");
    if (!lock || !ckpt || !restore || !unlock) {
        fprintf(stderr, "driver_ckpt: this driver has no checkpoint API\n");
        return 2;
    }
    CUcheckpointLockArgs la;
    CUcheckpointCheckpointArgs ca;
    CUcheckpointRestoreArgs ra;
    CUcheckpointUnlockArgs ua;
    memset(&la, 0, sizeof(la));
    memset(&ca, 0, sizeof(ca));
    memset(&ra, 0, sizeof(ra));
    memset(&ua, 0, sizeof(ua));
    la.timeoutMs = 60000;
    CUresult r;
    if (argc == 3) {
        const char *step = argv[2];
        double s0 = now();
        if (!strcmp(step, "lock"))
            r = lock(pid, &la);
        else if (!strcmp(step, "checkpoint"))
            r = ckpt(pid, &ca);
        else if (!strcmp(step, "restore"))
            r = restore(pid, &ra);
        else if (!strcmp(step, "unlock"))
            r = unlock(pid, &ua);
        else
            return 2;
        if (r != CUDA_SUCCESS)
            return fail(step, r);
        printf("{\"event\":\"step\",\"step\":\"%s\",\"seconds\":%.4f}\n", step, now() - s0);
        return 0;
    }
    double t0 = now();
    if ((r = lock(pid, &la)) != CUDA_SUCCESS)
        return fail("lock", r);
    double t1 = now();
    if ((r = ckpt(pid, &ca)) != CUDA_SUCCESS)
        return fail("checkpoint", r);
    double t2 = now();
    if ((r = restore(pid, &ra)) != CUDA_SUCCESS)
        return fail("restore", r);
    double t3 = now();
    if ((r = unlock(pid, &ua)) != CUDA_SUCCESS)
        return fail("unlock", r);
    double t4 = now();
    printf("{\"event\":\"anchor\",\"lock_s\":%.4f,\"checkpoint_s\":%.4f,\"restore_s\":%.4f,\"unlock_s\":%.4f}\n", t1 - t0,
           t2 - t1, t3 - t2, t4 - t3);
    return 0;
}
