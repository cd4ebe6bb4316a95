/* Runs the shim's digest kernel (block_digest.cu, shipped as a fatbin) on
 * device ranges: one 64-bit digest per block, 0 for an all-zero block. */
#ifndef GPUCKPT_BLOCK_DIGEST_H
#define GPUCKPT_BLOCK_DIGEST_H

#include <stdint.h>

#include "../interpose/cuda_api.h"
#include "gpuckpt_protocol.h"

/* Loads the kernel into device's primary context, whole (once). 0, or
 * -ENOSYS when the driver will not load it (remembered: later calls fail
 * at once). */
int gp_block_digest_load(int device, CUresult *cu_err);

/* digests for count ranges of device (checked by the caller: aligned,
 * inside live allocations, or mapped pool memory in a live window), in
 * order, each range cut in blocks of block_size, at most GPCK_MAX_DIGESTS
 * blocks; run on stream and waited for. 0, -EINVAL, -ENOSYS, -ENOMEM, or
 * -EIO with *cu_err. */
int gp_block_digest(int device, CUstream stream, const struct gpck_digest_range *ranges, uint32_t count,
                    uint64_t block_size, uint64_t *digests, CUresult *cu_err);

#endif
