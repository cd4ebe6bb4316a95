/* NCCL's communicators across a checkpoint: destroyed at the cut, so that
 * no peer (IPC) mapping, proxy thread or bootstrap socket of NCCL's reaches
 * the driver's checkpoint or CRIU, and made again afterwards from a fresh
 * unique id with the same ranks, device and config, behind the handles the
 * application keeps (communicators.h). The controller runs each on every
 * process of the job at once. why: one line for the controller. */
#ifndef GPUCKPT_REBUILD_H
#define GPUCKPT_REBUILD_H

#include <stddef.h>
#include <stdint.h>

#include "nccl_api.h"

/* Destroys every communicator, newest first. -EBUSY: the cut is not
 * reached (cut.h); -EIO: NCCL failed (why). */
int gp_nccl_teardown(char *why, size_t n);
/* A unique id for the rank 0 of a communicator to be made again. */
int gp_nccl_new_id(ncclUniqueId *out, char *why, size_t n);
/* Makes the communicator `key` again from id (its rank 0's new id).
 * -ENOENT: no such communicator; -EALREADY: it is up. */
int gp_nccl_rebuild(uint64_t key, const ncclUniqueId *id, char *why, size_t n);

#endif
