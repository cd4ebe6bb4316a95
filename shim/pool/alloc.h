/* Address-range allocator for one device slice of the pool.
 *
 * Pure bookkeeping over an integer range: it never touches memory, so it is
 * unit-tested without a GPU. Placement is address-ordered first fit, which
 * makes addresses a function of the sequence of alloc/free calls alone: the
 * same program making the same allocations gets the same addresses, run after
 * run. Free neighbours are coalesced at once.
 *
 * Not thread-safe by itself: the pool holds one lock per slice around it.
 * All functions return 0 or -errno.
 */
#ifndef GPUCKPT_POOL_ALLOC_H
#define GPUCKPT_POOL_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gp_alloc; /* opaque */

/* One live allocation, as reported by gp_alloc_foreach / gp_alloc_find. */
struct gp_extent {
    uint64_t addr;
    uint64_t size; /* size as placed (rounded up to the allocator's quantum) */
};

/* Creates an allocator over [base, base + size). base and size must be
 * multiples of quantum; quantum must be a power of two (the minimum alignment
 * and size granularity of every allocation). -EINVAL otherwise. */
int gp_alloc_create(uint64_t base, uint64_t size, uint64_t quantum, struct gp_alloc **out);
void gp_alloc_destroy(struct gp_alloc *a);

/* Places size bytes (rounded up to quantum) at the lowest address aligned to
 * align (a power of two; below quantum it is raised to quantum; 0 or not a
 * power of two: -EINVAL). size 0: -EINVAL.
 * -ENOMEM when no free range fits. */
int gp_alloc_get(struct gp_alloc *a, uint64_t size, uint64_t align, uint64_t *addr_out);

/* Frees the allocation that starts exactly at addr; its placed size goes to
 * *size_out when not NULL. -ENOENT if no allocation starts there (an interior
 * pointer or a double free). */
int gp_alloc_put(struct gp_alloc *a, uint64_t addr, uint64_t *size_out);

/* Finds the live allocation containing addr (interior pointers too).
 * -ENOENT if addr is free or outside the range. */
int gp_alloc_find(const struct gp_alloc *a, uint64_t addr, struct gp_extent *out);

/* Calls fn for every live allocation in address order; stops early and
 * returns fn's value when fn returns non-zero. */
int gp_alloc_foreach(const struct gp_alloc *a, int (*fn)(const struct gp_extent *, void *), void *arg);

/* Calls fn for every live allocation overlapping [lo, hi) in address order;
 * same return convention as gp_alloc_foreach. */
int gp_alloc_foreach_in(const struct gp_alloc *a, uint64_t lo, uint64_t hi,
                        int (*fn)(const struct gp_extent *, void *), void *arg);

struct gp_alloc_stats {
    uint64_t bytes_in_use;    /* sum of placed sizes of live allocations */
    uint64_t count;           /* number of live allocations */
    uint64_t largest_free;    /* largest free extent */
    uint64_t free_extents;    /* number of free extents (fragmentation) */
    uint64_t high_water;      /* highest end address ever placed, minus base */
};
void gp_alloc_stats(const struct gp_alloc *a, struct gp_alloc_stats *out);

#ifdef __cplusplus
}
#endif
#endif
