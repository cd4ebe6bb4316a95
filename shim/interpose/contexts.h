/* The contexts a quiesce must synchronise: every device's primary context
 * while it is active, plus contexts the application created itself. */
#ifndef GPUCKPT_CONTEXTS_H
#define GPUCKPT_CONTEXTS_H

#include <stdint.h>

#include "cuda_api.h"

void gp_contexts_add(CUcontext ctx);
void gp_contexts_remove(CUcontext ctx);
/* cuCtxSynchronize on each; 0 or -EIO (the CUresult in *cu_err). */
int gp_contexts_sync_all(int device_count, CUresult *cu_err);
/* Before a driver checkpoint: each context's stack limit set to the least,
 * so that the local memory the driver reserves for every thread the GPU
 * can hold (264 MiB a context on an H200, nearly all zeros) is given back
 * instead of copied; the limits it had are kept. 0 or -EIO. */
int gp_contexts_shrink_stacks(int device_count, CUresult *cu_err);
/* The limits shrink_stacks kept, set again (a no-op when none are kept);
 * 0, -ENOMEM (no room on the GPU) or -EIO, in which case the rest stay
 * kept for the next call. */
int gp_contexts_restore_stacks(CUresult *cu_err);
/* Makes device's primary context current on the calling (control) thread,
 * retaining it once for the life of the process. */
int gp_contexts_use_primary(int device, CUresult *cu_err);

#endif
