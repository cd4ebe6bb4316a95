#define _GNU_SOURCE
#include "spare_memory.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/mman.h>

#include "../interpose/log.h"
#include "../interpose/shim.h"

#ifndef MADV_FREE
#define MADV_FREE 8
#endif

/* The control thread takes it; detached release threads give it back. */
static pthread_mutex_t spare_lock = PTHREAD_MUTEX_INITIALIZER;
static void *spare_base;
static uint64_t spare_size;
/* false from a drop until the next take: memory a release thread gives
 * back late (after the drop) must not become a spare that CRIU dumps. */
static bool keeping = true;

/* The spare, now the caller's (NULL: none). */
static void *detach_spare(uint64_t *size, bool keep_after)
{
    pthread_mutex_lock(&spare_lock);
    keeping = keep_after;
    void *base = spare_base;
    *size = spare_size;
    spare_base = NULL;
    spare_size = 0;
    pthread_mutex_unlock(&spare_lock);
    return base;
}

void *gp_spare_take(uint64_t size, uint64_t *mapped, bool *fresh)
{
    uint64_t old_size;
    void *old = detach_spare(&old_size, true);
    *fresh = !old || old_size < size;
    if (!*fresh) {
        GP_INFO("staging", "reusing %llu MiB of host memory kept from the last suspend", (unsigned long long)(old_size >> 20));
        *mapped = old_size;
        return old;
    }
    if (old) /* too small: gone before new memory is asked for */
        munmap(old, old_size);
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    madvise(p, size, MADV_HUGEPAGE); /* a hint: without THP it is 4 KiB pages */
    *mapped = size;
    return p;
}

void gp_spare_give(void *base, uint64_t mapped)
{
    if (!base)
        return;
    void *old = base;
    uint64_t old_size = mapped;
    pthread_mutex_lock(&spare_lock);
    if (keeping && mapped <= gp_shim_config()->host_retain && madvise(base, mapped, MADV_FREE) == 0) {
        old = spare_base;
        old_size = spare_size;
        spare_base = base;
        spare_size = mapped;
    }
    pthread_mutex_unlock(&spare_lock);
    if (old) /* the older spare, or what is not kept */
        munmap(old, old_size);
}

void gp_spare_drop(void)
{
    uint64_t old_size;
    void *old = detach_spare(&old_size, false);
    if (old)
        munmap(old, old_size);
}
