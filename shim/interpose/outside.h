/* Bytes the application holds outside the pool (managed memory,
 * stream-ordered pools, pinned host memory, device memory the pool could not
 * serve): the driver keeps and checkpoints them itself; gpuckpt only counts
 * them so that ps and inspect can say how much is not in its images. */
#ifndef GPUCKPT_OUTSIDE_H
#define GPUCKPT_OUTSIDE_H

#include <stdint.h>

enum gp_outside_kind { GP_OUT_MANAGED, GP_OUT_STREAM_ORDERED, GP_OUT_HOST, GP_OUT_UNROUTED, GP_OUT_KINDS };

void gp_outside_add(uint64_t ptr, uint64_t size, enum gp_outside_kind kind);
/* Forgets ptr if it was recorded; returns 1 if it was. */
int gp_outside_remove(uint64_t ptr);
uint64_t gp_outside_bytes(enum gp_outside_kind kind);

#endif
