/* What the driver's checkpoint costs for a process that uses the GPU little
 * or not at all (torchrun's launcher: cuInit, the shim's pool reservation,
 * no context), against one with a context. For each shape a child sets it
 * up and waits; this process locks and checkpoints it, times both, and
 * reads the child's anonymous memory before and after (what CRIU would then
 * dump), then restores and unlocks it.
 *
 *   nvcc -O2 -o /tmp/idle_member test/gpu/probes/idle_member.c -lcuda && /tmp/idle_member [RUNS]
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define POOL_BASE 0x600000000000ull
#define SLICE (256ull << 30)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static double anon_mib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/smaps_rollup", (int)pid);
    FILE *f = fopen(path, "r");
    double kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Anonymous: %lf kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib / 1024;
}

/* Sets up shape in the child, then tells the parent and waits to be killed. */
static void child(const char *shape, int ready_fd)
{
    int devices = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&devices) != CUDA_SUCCESS)
        _exit(2);
    if (strstr(shape, "reserve"))
        for (int d = 0; d < devices && d < 8; d++) {
            CUdeviceptr at = 0;
            if (cuMemAddressReserve(&at, SLICE, 2ull << 20, POOL_BASE + d * SLICE, 0) != CUDA_SUCCESS)
                _exit(3);
        }
    if (strstr(shape, "context")) {
        CUcontext ctx;
        if (cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
            _exit(4);
    }
    char c = 1;
    if (write(ready_fd, &c, 1) != 1)
        _exit(5);
    pause();
    _exit(0);
}

static void measure(const char *shape, int run)
{
    int p[2];
    if (pipe(p))
        exit(1);
    pid_t pid = fork();
    if (pid == 0) {
        /* exec'd: a child forked from a process that uses CUDA cannot use it */
        close(p[0]);
        char fd[16];
        snprintf(fd, sizeof fd, "%d", p[1]);
        execl("/proc/self/exe", "idle_member", "--child", shape, fd, (char *)NULL);
        _exit(6);
    }
    close(p[1]);
    char c;
    if (read(p[0], &c, 1) != 1) {
        int st;
        waitpid(pid, &st, 0);
        printf("%-16s run %d: set-up failed (exit %d)\n", shape, run, WEXITSTATUS(st));
        return;
    }
    close(p[0]);
    double before = anon_mib(pid);
    CUcheckpointLockArgs la = {0};
    CUcheckpointCheckpointArgs ca = {0};
    CUcheckpointRestoreArgs ra = {0};
    CUcheckpointUnlockArgs ua = {0};
    double t0 = now();
    CUresult r1 = cuCheckpointProcessLock(pid, &la);
    double t1 = now();
    CUresult r2 = r1 ? r1 : cuCheckpointProcessCheckpoint(pid, &ca);
    double t2 = now();
    double after = anon_mib(pid);
    CUresult r3 = r2 ? r2 : cuCheckpointProcessRestore(pid, &ra);
    double t3 = now();
    CUresult r4 = r3 ? r3 : cuCheckpointProcessUnlock(pid, &ua);
    printf("%-16s run %d: lock %.3f s, checkpoint %.3f s, restore %.3f s; anon %.1f -> %.1f MiB (results %d %d %d %d)\n",
           shape, run, t1 - t0, t2 - t1, t3 - t2, before, after, r1, r2, r3, r4);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--child"))
        child(argv[2], atoi(argv[3]));
    int runs = argc > 1 ? atoi(argv[1]) : 2;
    const char *shapes[] = {"init", "init+reserve", "context", "context+reserve"};
    if (cuInit(0) != CUDA_SUCCESS)
        return 1;
    for (int run = 1; run <= runs; run++)
        for (unsigned i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            measure(shapes[i], run);
    return 0;
}
