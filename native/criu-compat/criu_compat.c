/* Preloaded into CRIU by gpuckpt (controller/adapters/criu.ts) when CRIU is
 * older than 4.2: Linux 6.16 refuses SO_PASSCRED and SO_PASSSEC on sockets
 * other than Unix and netlink ones, and CRIU before 4.2 reads both from
 * every socket it dumps, failing on any TCP or UDP socket. CRIU 4.2 skips
 * them there (its commit 4b73985); this answers 0, which restores the same:
 * CRIU sets them at restore only when they were 1. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#ifndef SO_PASSSEC
#define SO_PASSSEC 34
#endif

typedef int (*getsockopt_fn)(int, int, int, void *, socklen_t *);

static int family_of(int fd)
{
    struct sockaddr_storage a;
    socklen_t len = sizeof(a);
    memset(&a, 0, sizeof(a));
    return getsockname(fd, (struct sockaddr *)&a, &len) == 0 ? a.ss_family : -1;
}

__attribute__((visibility("default"))) int getsockopt(int fd, int level, int name, void *value, socklen_t *len)
{
    static getsockopt_fn real;
    if (!real)
        real = (getsockopt_fn)dlsym(RTLD_NEXT, "getsockopt");
    int r = real(fd, level, name, value, len);
    if (r == 0 || errno != EOPNOTSUPP || level != SOL_SOCKET || (name != SO_PASSCRED && name != SO_PASSSEC))
        return r;
    int family = family_of(fd);
    if (family == AF_UNIX || family == AF_NETLINK || !value || !len || *len < sizeof(int))
        return r;
    *(int *)value = 0;
    *len = sizeof(int);
    errno = 0;
    return 0;
}
