/* Who allocates large host memory in a process, by the library that asked:
 * an LD_PRELOAD library that logs every mmap and malloc-family request of
 * 1 MiB or more with the caller's DSO, to $MMAP_CALLERS_LOG. Used to find
 * how the driver's checkpoint allocates its copy of device state.
 *
 *   gcc -O2 -shared -fPIC -o /tmp/mmap_callers.so test/gpu/probes/mmap_callers.c -ldl
 *   MMAP_CALLERS_LOG=/tmp/calls.log LD_PRELOAD=/tmp/mmap_callers.so PROG
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

#define BIG (1ul << 20)

static void note(const char *what, void *caller, void *at, size_t len)
{
    const char *path = getenv("MMAP_CALLERS_LOG");
    if (!path)
        return;
    Dl_info info = {0};
    const char *dso = dladdr(caller, &info) && info.dli_fname ? info.dli_fname : "?";
    const char *base = strrchr(dso, '/');
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char line[512];
    int n = snprintf(line, sizeof line, "%ld.%06ld tid %ld %s %zu at %p by %s\n", (long)ts.tv_sec, ts.tv_nsec / 1000,
                     (long)syscall(SYS_gettid), what, len, at, base ? base + 1 : dso);
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        if (write(fd, line, (size_t)n) < 0) {
        }
        close(fd);
    }
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    void *at = (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
    if (len >= BIG && at != MAP_FAILED && (flags & MAP_ANONYMOUS))
        note((flags & MAP_SHARED) ? "mmap-shared" : "mmap", __builtin_return_address(0), at, len);
    return at;
}
void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) __attribute__((alias("mmap")));

void *malloc(size_t n)
{
    void *p = __libc_malloc(n);
    if (n >= BIG)
        note("malloc", __builtin_return_address(0), p, n);
    return p;
}
void *calloc(size_t a, size_t b)
{
    void *p = __libc_calloc(a, b);
    if (a * b >= BIG)
        note("calloc", __builtin_return_address(0), p, a * b);
    return p;
}
void *realloc(void *q, size_t n)
{
    void *p = __libc_realloc(q, n);
    if (n >= BIG)
        note("realloc", __builtin_return_address(0), p, n);
    return p;
}
int posix_memalign(void **out, size_t align, size_t n)
{
    void *p = __libc_memalign(align, n);
    if (!p)
        return 12;
    *out = p;
    if (n >= BIG)
        note("memalign", __builtin_return_address(0), p, n);
    return 0;
}
void *memalign(size_t align, size_t n)
{
    void *p = __libc_memalign(align, n);
    if (n >= BIG)
        note("memalign", __builtin_return_address(0), p, n);
    return p;
}
void *aligned_alloc(size_t align, size_t n) __attribute__((alias("memalign")));
