// Whether the driver's checkpoint and restore of two processes (one per
// GPU, as a 2-rank job's) serialize in the calling process's libcuda or in
// the driver: each target alone, then both at once from two threads of this
// process (as the controller calls them), then both at once from two
// processes of their own.
//   nvcc -O2 -o /tmp/dp test/gpu/probes/driver_pair.c -lcuda -lpthread && /tmp/dp [MIB]
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CK(x) do { CUresult r_ = (x); if (r_) { printf("FAIL %s = %d (line %d)\n", #x, r_, __LINE__); fflush(stdout); } } while (0)

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

/* A target: a context on its GPU holding mib MiB written, then idle. */
static pid_t target(int gpu, size_t mib)
{
    int fd[2];
    if (pipe(fd))
        exit(1);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        CK(cuInit(0));
        CUdevice dev;
        CUcontext ctx;
        CK(cuDeviceGet(&dev, gpu));
        CK(cuDevicePrimaryCtxRetain(&ctx, dev));
        CK(cuCtxSetCurrent(ctx));
        CUdeviceptr d;
        CK(cuMemAlloc(&d, mib << 20));
        CK(cuMemsetD8(d, 5, mib << 20));
        CK(cuCtxSynchronize());
        char c = 1;
        if (write(fd[1], &c, 1) != 1)
            exit(1);
        for (;;)
            pause();
    }
    close(fd[1]);
    char c;
    if (read(fd[0], &c, 1) != 1)
        exit(1);
    close(fd[0]);
    return pid;
}

struct call { pid_t pid; int freeze; double seconds; };

static void *drive(void *arg)
{
    struct call *c = arg;
    double t0 = now();
    if (c->freeze) {
        CUcheckpointLockArgs la = { 0 };
        la.timeoutMs = 60000;
        CUcheckpointCheckpointArgs ca = { 0 };
        CK(cuCheckpointProcessLock(c->pid, &la));
        CK(cuCheckpointProcessCheckpoint(c->pid, &ca));
    } else {
        CUcheckpointRestoreArgs ra = { 0 };
        CUcheckpointUnlockArgs ua = { 0 };
        CK(cuCheckpointProcessRestore(c->pid, &ra));
        CK(cuCheckpointProcessUnlock(c->pid, &ua));
    }
    c->seconds = now() - t0;
    return NULL;
}

/* Two processes that make the driver calls they are sent: forked before
 * this process starts the driver (CUDA does not survive a fork). */
static int helper_cmd[2], helper_rep[2];

static void start_helpers(void)
{
    for (int i = 0; i < 2; i++) {
        int cmd[2], rep[2];
        if (pipe(cmd) || pipe(rep))
            exit(1);
        if (fork() == 0) {
            CK(cuInit(0));
            struct call c;
            while (read(cmd[0], &c, sizeof c) == sizeof c) {
                drive(&c);
                if (write(rep[1], &c.seconds, sizeof c.seconds) != sizeof c.seconds)
                    exit(1);
            }
            exit(0);
        }
        helper_cmd[i] = cmd[1];
        helper_rep[i] = rep[0];
    }
}

/* Both targets at once: from two threads here, or from the two helpers. */
static void both(pid_t *t, int freeze, int processes, double *out)
{
    struct call c[2] = { { t[0], freeze, 0 }, { t[1], freeze, 0 } };
    if (!processes) {
        pthread_t th[2];
        for (int i = 0; i < 2; i++)
            pthread_create(&th[i], NULL, drive, &c[i]);
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        out[0] = c[0].seconds;
        out[1] = c[1].seconds;
        return;
    }
    for (int i = 0; i < 2; i++)
        if (write(helper_cmd[i], &c[i], sizeof c[i]) != sizeof c[i])
            exit(1);
    for (int i = 0; i < 2; i++)
        if (read(helper_rep[i], &out[i], sizeof(double)) != sizeof(double))
            out[i] = -1;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)atoi(argv[1]) : 1024;
    pid_t t[2] = { target(0, mib), target(1, mib) };
    start_helpers();
    CK(cuInit(0)); /* the controller's process has the driver loaded too */
    printf("targets %d (GPU 0) and %d (GPU 1), %zu MiB each\n", t[0], t[1], mib);
    for (int round = 0; round < 3; round++) {
        double a[2], b[2];
        for (int i = 0; i < 2; i++) {
            struct call f = { t[i], 1, 0 }, r = { t[i], 0, 0 };
            drive(&f);
            drive(&r);
            a[i] = f.seconds;
            b[i] = r.seconds;
        }
        printf("round %d alone:            checkpoint %.3f %.3f  restore %.3f %.3f\n", round, a[0], a[1], b[0], b[1]);
        for (int processes = 0; processes < 2; processes++) {
            double f[2], r[2];
            both(t, 1, processes, f);
            both(t, 0, processes, r);
            printf("round %d both, %s: checkpoint %.3f %.3f  restore %.3f %.3f\n", round, processes ? "2 processes" : "2 threads  ",
                   f[0], f[1], r[0], r[1]);
        }
        fflush(stdout);
    }
    kill(t[0], SIGKILL);
    kill(t[1], SIGKILL);
    close(helper_cmd[0]);
    close(helper_cmd[1]);
    while (wait(NULL) > 0)
        ;
    return 0;
}
