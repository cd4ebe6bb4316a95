#define _GNU_SOURCE
#include "driver_mappings.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_api.h"

typedef void *(*mmap_fn)(void *, size_t, int, int, int, off_t);
typedef int (*munmap_fn)(void *, size_t);
typedef void *(*mremap_fn)(void *, size_t, size_t, int, ...);

static mmap_fn real_mmap;
static munmap_fn real_munmap;
static mremap_fn real_mremap;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t scan_done = PTHREAD_COND_INITIALIZER;
static atomic_bool watching;
/* Nonzero while anything is recorded: the unmap paths take the lock only then. */
static atomic_uint count;
static struct gp_mapping recorded[GP_DRIVER_MAPPINGS_MAX];
/* A scan reads the records' memory without the lock (it allocates, and an
 * allocator may unmap through these very calls); what would change a
 * record's memory waits for it instead. */
static bool scanning;
/* libcuda's loaded segments: the callers whose mappings are recorded. */
static uintptr_t driver_lo, driver_hi;

/* Resolved at load: looked up inside a call, dlsym would take the loader's
 * lock in whatever thread maps memory first. */
__attribute__((constructor)) static void resolve_real(void)
{
    real_mmap = (mmap_fn)dlsym(RTLD_NEXT, "mmap");
    real_munmap = (munmap_fn)dlsym(RTLD_NEXT, "munmap");
    real_mremap = (mremap_fn)dlsym(RTLD_NEXT, "mremap");
}

static void ensure_real(void)
{
    if (!real_mmap || !real_munmap || !real_mremap) /* called before our constructor ran */
        resolve_real();
}

struct find_object {
    uintptr_t at, lo, hi;
};

static int find_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct find_object *f = arg;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        lo = a < lo ? a : lo;
        hi = a + ph->p_memsz > hi ? a + ph->p_memsz : hi;
    }
    if (f->at < lo || f->at >= hi)
        return 0;
    f->lo = lo;
    f->hi = hi;
    return 1;
}

void gp_driver_mappings_know_driver(const void *fn)
{
    struct find_object f = { (uintptr_t)fn, 0, 0 };
    if (fn && dl_iterate_phdr(find_object, &f)) {
        driver_lo = f.lo;
        driver_hi = f.hi;
    }
}

static bool overlaps(const struct gp_mapping *m, uintptr_t lo, size_t len)
{
    return m->lo < lo + len && lo < m->lo + m->len;
}

static bool overlaps_any(uintptr_t lo, size_t len)
{
    unsigned n = atomic_load(&count);
    for (unsigned i = 0; i < n; i++)
        if (overlaps(&recorded[i], lo, len))
            return true;
    return false;
}

/* The lock held: waits while a scan may read [lo, lo + len). */
static void wait_for_scan(uintptr_t lo, size_t len)
{
    while (scanning && overlaps_any(lo, len))
        pthread_cond_wait(&scan_done, &lock);
}

/* Forgets every record that [lo, lo + len) touches; the lock is held. */
static void forget_overlaps(uintptr_t lo, size_t len)
{
    unsigned n = atomic_load(&count);
    for (unsigned i = 0; i < n;) {
        if (overlaps(&recorded[i], lo, len))
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
    ensure_real();
    void *at;
    if ((flags & MAP_FIXED) && atomic_load(&count)) {
        /* Mapped over a record: the memory is no longer the driver's. */
        pthread_mutex_lock(&lock);
        wait_for_scan((uintptr_t)addr, len);
        at = real_mmap(addr, len, prot, flags, fd, off);
        int e = errno;
        if (at != MAP_FAILED)
            forget_overlaps((uintptr_t)at, len);
        pthread_mutex_unlock(&lock);
        errno = e;
    } else {
        at = real_mmap(addr, len, prot, flags, fd, off);
    }
    uintptr_t from = (uintptr_t)caller;
    if (atomic_load(&watching) && at != MAP_FAILED && len >= GP_DRIVER_MAPPING_MIN && (flags & MAP_ANONYMOUS) &&
        (flags & MAP_TYPE) == MAP_PRIVATE && from >= driver_lo && from < driver_hi)
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
    ensure_real();
    if (!atomic_load(&count))
        return real_munmap(addr, len);
    pthread_mutex_lock(&lock);
    wait_for_scan((uintptr_t)addr, len);
    int rc = real_munmap(addr, len);
    int e = errno;
    if (rc == 0)
        forget_overlaps((uintptr_t)addr, len);
    pthread_mutex_unlock(&lock);
    errno = e;
    return rc;
}

GP_EXPORT void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
    ensure_real();
    void *to = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        to = va_arg(ap, void *);
        va_end(ap);
    }
    if (!atomic_load(&count))
        return real_mremap(old, old_len, new_len, flags, to);
    pthread_mutex_lock(&lock);
    wait_for_scan((uintptr_t)old, old_len);
    if (to)
        wait_for_scan((uintptr_t)to, new_len);
    void *at = real_mremap(old, old_len, new_len, flags, to);
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
    pthread_cond_init(&scan_done, NULL);
    scanning = false;
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
    atomic_store(&watching, on && driver_hi);
    if (!on)
        atomic_store(&count, 0);
    pthread_mutex_unlock(&lock);
}

int gp_driver_mappings_with(int (*fn)(const struct gp_mapping *m, unsigned n, void *arg), void *arg)
{
    struct gp_mapping copy[GP_DRIVER_MAPPINGS_MAX];
    pthread_mutex_lock(&lock);
    unsigned n = atomic_load(&count);
    memcpy(copy, recorded, n * sizeof(copy[0]));
    scanning = true;
    pthread_mutex_unlock(&lock);
    int rc = fn(copy, n, arg);
    pthread_mutex_lock(&lock);
    scanning = false;
    pthread_cond_broadcast(&scan_done);
    pthread_mutex_unlock(&lock);
    return rc;
}
