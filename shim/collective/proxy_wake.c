#define _GNU_SOURCE
#include "proxy_wake.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "../interpose/cuda_api.h"
#include "../interpose/log.h"

static atomic_int armed;

void gp_proxy_wake_arm(bool on)
{
    atomic_fetch_add(&armed, on ? 1 : -1);
}

/* What a thread is blocked in, from /proc/self/task/TID/syscall ("NR ARG1
 * .. ARG6 SP PC"); false when it runs or the file cannot be read. */
struct blocked_call {
    long nr;
    uintptr_t arg[6], sp;
};

static bool blocked_in(const char *tid, struct blocked_call *b)
{
    char path[320], text[256];
    snprintf(path, sizeof(path), "/proc/self/task/%s/syscall", tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, text, sizeof(text) - 1);
    close(fd);
    if (n <= 0)
        return false;
    text[n] = '\0';
    return sscanf(text, "%ld %lx %lx %lx %lx %lx %lx %lx", &b->nr, &b->arg[0], &b->arg[1], &b->arg[2], &b->arg[3],
                  &b->arg[4], &b->arg[5], &b->sp) == 8;
}

static bool is_poll(long nr)
{
#ifdef SYS_poll
    if (nr == SYS_poll)
        return true;
#endif
    return nr == SYS_ppoll;
}

/* fd is a datagram socket bound to NCCL's abstract name, which NCCL writes
 * as "/tmp/nccl-socket-RANK-HASH" and then overwrites its '/' with '\0'. */
static bool nccl_socket(int fd, struct sockaddr_un *addr, socklen_t *len)
{
    static const char name[] = "tmp/nccl-socket-";
    int type = 0;
    socklen_t tl = sizeof(type);
    *len = sizeof(*addr);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_DGRAM ||
        getsockname(fd, (struct sockaddr *)addr, len) != 0 || addr->sun_family != AF_UNIX)
        return false;
    return *len >= offsetof(struct sockaddr_un, sun_path) + sizeof(name) && addr->sun_path[0] == '\0' &&
           memcmp(addr->sun_path + 1, name, sizeof(name) - 1) == 0;
}

int gp_proxy_wake(pthread_t t)
{
    /* The task that is t: the one whose stack pointer lies in t's stack. */
    pthread_attr_t attr;
    void *stack;
    size_t size;
    if (pthread_getattr_np(t, &attr) != 0)
        return 0;
    int got = pthread_attr_getstack(&attr, &stack, &size);
    pthread_attr_destroy(&attr);
    if (got != 0)
        return 0;
    uintptr_t lo = (uintptr_t)stack, hi = lo + size;

    DIR *d = opendir("/proc/self/task");
    if (!d)
        return 0;
    int woke = 0;
    struct dirent *e;
    while ((e = readdir(d)) && !woke) {
        struct blocked_call b;
        if (e->d_name[0] == '.' || !blocked_in(e->d_name, &b) || b.sp < lo || b.sp >= hi)
            continue;
        /* Its one pollfd lies on its own stack, which stays mapped until
         * the join: read it only there. */
        if (!is_poll(b.nr) || b.arg[1] != 1 || b.arg[0] < lo || b.arg[0] + sizeof(struct pollfd) > hi)
            break;
        struct sockaddr_un addr;
        socklen_t len;
        int fd = ((const struct pollfd *)b.arg[0])->fd;
        if (!nccl_socket(fd, &addr, &len))
            break;
        int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (s < 0)
            break;
        woke = sendto(s, "", 0, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&addr, len) == 0;
        close(s);
        GP_DEBUG("nccl", "thread %s asleep in poll on NCCL's socket %d: %s", e->d_name, fd,
                 woke ? "woken for its join" : "could not be woken");
    }
    closedir(d);
    return woke;
}

typedef int (*pthread_join_fn)(pthread_t, void **);
static pthread_join_fn real_join;

/* Resolved at load, as driver_mappings.c does for mmap: looked up inside
 * the first join, dlsym would take the loader's lock in that thread. */
__attribute__((constructor)) static void resolve_real(void)
{
    real_join = (pthread_join_fn)dlsym(RTLD_NEXT, "pthread_join");
}

GP_EXPORT int pthread_join(pthread_t t, void **result)
{
    if (!real_join) /* joined before our constructor ran */
        resolve_real();
    if (!real_join)
        return ENOSYS;
    if (atomic_load(&armed) > 0)
        gp_proxy_wake(t);
    return real_join(t, result);
}
