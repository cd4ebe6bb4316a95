#define _GNU_SOURCE
#include "driver_mappings.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_api.h"
#include "real_driver.h"

typedef void *(*mmap_fn)(void *, size_t, int, int, int, off_t);
typedef int (*munmap_fn)(void *, size_t);
typedef void *(*mremap_fn)(void *, size_t, size_t, int, ...);

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool watching;
/* Nonzero while anything is recorded: the unmap paths take the lock only then. */
static atomic_uint count;
static struct gp_mapping recorded[GP_DRIVER_MAPPINGS_MAX];

/* libcuda's load address, once it is loaded (0 before). */
static uintptr_t libcuda_base(void)
{
    static uintptr_t base;
    if (!base && gp_real_loaded()) {
        Dl_info info;
        if (dladdr(gp_real[GP_IDX_cuInit], &info) && info.dli_fbase)
            base = (uintptr_t)info.dli_fbase;
    }
    return base;
}

static bool from_libcuda(const void *caller)
{
    uintptr_t base = libcuda_base();
    Dl_info info;
    return base && dladdr(caller, &info) && (uintptr_t)info.dli_fbase == base;
}

/* Forgets every record that [lo, lo + len) touches; the lock is held. */
static void forget_overlaps(uintptr_t lo, size_t len)
{
    unsigned n = atomic_load(&count);
    for (unsigned i = 0; i < n;) {
        if (recorded[i].lo < lo + len && lo < recorded[i].lo + recorded[i].len)
            recorded[i] = recorded[--n];
        else
            i++;
    }
    atomic_store(&count, n);
}

static void record(void *at, size_t len)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    pthread_mutex_lock(&lock);
    unsigned n = atomic_load(&count);
    if (atomic_load(&watching) && n < GP_DRIVER_MAPPINGS_MAX) {
        recorded[n] = (struct gp_mapping){ (uintptr_t)at, (len + page - 1) / page * page };
        atomic_store(&count, n + 1);
    }
    pthread_mutex_unlock(&lock);
}

static void *interposed_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off, const void *caller)
{
    static mmap_fn real;
    if (!real)
        real = (mmap_fn)dlsym(RTLD_NEXT, "mmap");
    void *at;
    if ((flags & (MAP_FIXED | MAP_FIXED_NOREPLACE)) && atomic_load(&count)) {
        /* Mapped over a record: the memory is no longer the driver's. */
        pthread_mutex_lock(&lock);
        at = real(addr, len, prot, flags, fd, off);
        if (at != MAP_FAILED)
            forget_overlaps((uintptr_t)at, len);
        pthread_mutex_unlock(&lock);
    } else {
        at = real(addr, len, prot, flags, fd, off);
    }
    if (atomic_load(&watching) && at != MAP_FAILED && len >= GP_DRIVER_MAPPING_MIN && (flags & MAP_ANONYMOUS) &&
        (flags & MAP_TYPE) == MAP_PRIVATE && from_libcuda(caller))
        record(at, len);
    return at;
}

GP_EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return interposed_mmap(addr, len, prot, flags, fd, off, __builtin_return_address(0));
}

GP_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return interposed_mmap(addr, len, prot, flags, fd, off, __builtin_return_address(0));
}

GP_EXPORT int munmap(void *addr, size_t len)
{
    static munmap_fn real;
    if (!real)
        real = (munmap_fn)dlsym(RTLD_NEXT, "munmap");
    if (!atomic_load(&count))
        return real(addr, len);
    pthread_mutex_lock(&lock);
    int rc = real(addr, len);
    int e = errno;
    if (rc == 0)
        forget_overlaps((uintptr_t)addr, len);
    pthread_mutex_unlock(&lock);
    errno = e;
    return rc;
}

GP_EXPORT void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
    static mremap_fn real;
    if (!real)
        real = (mremap_fn)dlsym(RTLD_NEXT, "mremap");
    void *to = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        to = va_arg(ap, void *);
        va_end(ap);
    }
    if (!atomic_load(&count))
        return real(old, old_len, new_len, flags, to);
    pthread_mutex_lock(&lock);
    void *at = real(old, old_len, new_len, flags, to);
    int e = errno;
    if (at != MAP_FAILED) {
        forget_overlaps((uintptr_t)old, old_len);
        forget_overlaps((uintptr_t)at, new_len);
    }
    pthread_mutex_unlock(&lock);
    errno = e;
    return at;
}

/* A child forked mid-scan must not find the lock held by a thread it lacks;
 * and the driver's memory it inherited is its own copy, not to be dropped. */
static void forget_in_child(void)
{
    pthread_mutex_init(&lock, NULL);
    atomic_store(&watching, false);
    atomic_store(&count, 0);
}

static void register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, forget_in_child);
}

void gp_driver_mappings_watch(bool on)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    if (on)
        pthread_once(&once, register_fork_handler);
    pthread_mutex_lock(&lock);
    atomic_store(&watching, on);
    if (!on)
        atomic_store(&count, 0);
    pthread_mutex_unlock(&lock);
}

int gp_driver_mappings_with(int (*fn)(const struct gp_mapping *m, unsigned n, void *arg), void *arg)
{
    pthread_mutex_lock(&lock);
    int rc = fn(recorded, atomic_load(&count), arg);
    pthread_mutex_unlock(&lock);
    return rc;
}
