/* The application is out of GPU memory: asks the snapshot holder
 * (native/holder/) to let go of GPU-held snapshots on that GPU, oldest
 * first (GPCK_HOLD_RECLAIM). Any application thread; 0 and *freed, or
 * -errno (-ENOENT: no holder runs). */
#ifndef GPUCKPT_SNAPSHOT_RECLAIM_H
#define GPUCKPT_SNAPSHOT_RECLAIM_H

#include <stdint.h>

int gp_snapshot_reclaim(int device, uint64_t bytes, uint64_t *freed);

#endif
