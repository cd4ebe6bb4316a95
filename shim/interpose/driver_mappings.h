/* Host memory the driver maps for itself while a checkpoint is under way:
 * its copy of the device state outside the pool (0.6-1.5 GB a process on
 * the H200 hosts, 87-97 % zero pages), which CRIU would dump whole. The
 * shim interposes mmap, munmap and mremap; while watching, it records the
 * large private anonymous mappings whose caller is libcuda, and forgets
 * any that something unmaps, remaps or maps over. */
#ifndef GPUCKPT_DRIVER_MAPPINGS_H
#define GPUCKPT_DRIVER_MAPPINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GP_DRIVER_MAPPINGS_MAX 64
/* Smaller mappings are not worth a scan. */
#define GP_DRIVER_MAPPING_MIN (4ul << 20)

struct gp_mapping {
    uintptr_t lo;
    size_t len; /* whole pages */
};

/* Where libcuda lies, from one of its functions: its callers are the
 * driver's (once, as it is loaded: the loader's lock is not taken later). */
void gp_driver_mappings_know_driver(const void *fn);

/* Starts recording (on; not before the driver is known) or stops and
 * forgets what was recorded. */
void gp_driver_mappings_watch(bool on);

/* Calls fn with a copy of what is recorded; until it returns, an
 * interposed munmap, mremap or fixed mmap of that memory waits (others go
 * on: fn may allocate). Returns fn's result. */
int gp_driver_mappings_with(int (*fn)(const struct gp_mapping *m, unsigned n, void *arg), void *arg);

#endif
