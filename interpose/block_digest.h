/* Runs the shim's digest kernel (block_digest.cu, shipped as PTX) on a
 * device range: one 64-bit digest per block, 0 for an all-zero block. */
#ifndef GPUCKPT_BLOCK_DIGEST_H
#define GPUCKPT_BLOCK_DIGEST_H

#include <stdint.h>

#include "cuda_api.h"

/* digests[ceil(length / block_size)] for [addr, addr + length) on device
 * (the caller checked the range and holds the application still).
 * 0, -ENOSYS (the driver would not load or run the kernel), -ENOMEM, or
 * -EIO with *cu_err. */
int gp_block_digest(int device, CUdeviceptr addr, uint64_t length, uint64_t block_size, uint64_t *digests,
                    CUresult *cu_err);

#endif
