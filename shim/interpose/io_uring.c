/* io_uring refused to the application: CRIU cannot save an io_uring
 * instance, so a process holding one cannot be checkpointed whole. Its
 * users fall back to plain syscalls when the kernel has none: libuv, in
 * PyTorch's TCPStore (torchrun's agent opens one) and in Node, then uses
 * epoll alone. GPUCKPT_ALLOW_IO_URING=1 lets it through (and the checkpoint
 * is refused by name). libuv calls io_uring_setup through syscall(2), which
 * is where the shim stands. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

#include "cuda_api.h"

typedef long (*syscall_fn)(long, ...);

static int allowed(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("GPUCKPT_ALLOW_IO_URING");
        v = e && strcmp(e, "1") == 0;
    }
    return v;
}

GP_EXPORT long syscall(long number, ...)
{
    static syscall_fn real;
    if (!real)
        real = (syscall_fn)dlsym(RTLD_NEXT, "syscall");
    va_list ap;
    va_start(ap, number);
    long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
    long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
    va_end(ap);
    if (number == __NR_io_uring_setup && !allowed()) {
        errno = ENOSYS;
        return -1;
    }
    return real(number, a, b, c, d, e, f);
}
