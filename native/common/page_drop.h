/* Drops the page table entries of a large shared mapping from several
 * threads before its munmap: munmap alone zapped a 16 GiB staging's 4 M
 * entries on one thread in 0.9-1.2 s; MADV_DONTNEED takes the mm's lock
 * shared, so the slices go at once. Only for MAP_SHARED memory (memfds):
 * the files keep the data and the mapping stays valid. Shared by the
 * addon (the controller's staging) and the shim (the application's). */
#ifndef GPUCKPT_PAGE_DROP_H
#define GPUCKPT_PAGE_DROP_H

#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#define GP_PAGE_DROP_SLICE (256ULL << 20) /* smaller: not worth a thread */
#define GP_PAGE_DROP_MAX_THREADS 32

struct gp_page_slice {
    uint8_t *at;
    uint64_t bytes;
};

static inline void *gp_page_slice_drop(void *arg)
{
    struct gp_page_slice *s = (struct gp_page_slice *)arg;
    madvise(s->at, s->bytes, MADV_DONTNEED);
    return 0;
}

static inline void gp_drop_pages_parallel(void *base, uint64_t span)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t threads = span / GP_PAGE_DROP_SLICE;
    if (cpus > 0 && threads > (uint64_t)cpus)
        threads = (uint64_t)cpus;
    if (threads > GP_PAGE_DROP_MAX_THREADS)
        threads = GP_PAGE_DROP_MAX_THREADS;
    if (threads < 2)
        return;
    const uint64_t huge = 2ULL << 20;
    uint64_t per = (span / threads + huge - 1) / huge * huge;
    struct gp_page_slice slices[GP_PAGE_DROP_MAX_THREADS + 1];
    pthread_t ids[GP_PAGE_DROP_MAX_THREADS + 1];
    int started[GP_PAGE_DROP_MAX_THREADS + 1] = { 0 };
    uint64_t n = 0;
    for (uint64_t at = 0; at < span && n <= GP_PAGE_DROP_MAX_THREADS; at += per, n++) {
        slices[n].at = (uint8_t *)base + at;
        slices[n].bytes = span - at < per ? span - at : per;
        started[n] = pthread_create(&ids[n], 0, gp_page_slice_drop, &slices[n]) == 0;
        if (!started[n]) /* no thread to be had: this one does it */
            gp_page_slice_drop(&slices[n]);
    }
    for (uint64_t i = 0; i < n; i++)
        if (started[i])
            pthread_join(ids[i], 0);
}

#endif
