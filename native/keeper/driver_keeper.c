/* gpuckpt-driver-keeper PID STARTTIME: keeps the CUDA driver initialised
 * on this host while process PID is suspended, and nothing more: cuInit
 * only, no context, no GPU memory.
 *
 * Why: while the only process of a GPU is checkpointed by the driver, the
 * next process to call cuInit pays the driver's cold start: 0.32 s on the
 * H200 hosts, against 0.035 s while any other process has called cuInit
 * (test/gpu/probes/warm_keeper.c; a process that only opened NVML does not
 * help, and the checkpoint's and restore's own times are the same either
 * way). That cold start was a third of every resume. `gpuckpt suspend`
 * starts this keeper; the resume ends it once the application holds the
 * driver again (controller/adapters/driver-keeper.ts).
 *
 * It prints "ready" once cuInit returned, or "failed: WHY" and exits 1, on
 * stdout (the controller's pipe, which it then lets go of), and exits when
 * PID exits, on SIGTERM, or at once when PID is not the process that
 * STARTTIME (field 22 of /proc/PID/stat) names: a PID reused meanwhile. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../common/proc_stat.h"

static int failed(const char *why)
{
    printf("failed: %s\n", why);
    return 1;
}

static long parse_number(const char *s)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    return errno || end == s || *end || v <= 0 ? -1 : v;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: gpuckpt-driver-keeper PID STARTTIME\n");
        return 2;
    }
    long pid = parse_number(argv[1]);
    long start = parse_number(argv[2]);
    if (pid < 0 || start < 0)
        return failed("bad arguments");
    /* Open first, then check: the pidfd names this very process even if
     * the PID is reused later. */
    int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
    if (pidfd < 0)
        return failed(strerror(errno));
    if (gp_proc_start_time(pid) != (unsigned long long)start)
        return failed("no such process");
    if (chdir("/") != 0) /* pins no directory of the caller's */
        return failed(strerror(errno));

    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    int (*cu_init)(unsigned) = lib ? (int (*)(unsigned))dlsym(lib, "cuInit") : NULL;
    if (!cu_init)
        return failed("no NVIDIA driver (libcuda.so.1)");
    int r = cu_init(0);
    if (r) {
        char why[32];
        snprintf(why, sizeof(why), "cuInit: CUresult %d", r);
        return failed(why);
    }
    printf("ready\n");
    fflush(stdout);
    /* Let go of the controller's pipe: it is gone soon after. */
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0)
        dup2(null, STDOUT_FILENO);

    struct pollfd p = { .fd = pidfd, .events = POLLIN };
    while (poll(&p, 1, -1) < 0 && errno == EINTR)
        ;
    return 0;
}
