#define _GNU_SOURCE
#include "block_digest.h"

#include <errno.h>
#include <stdbool.h>

#include "../interpose/contexts.h"
#include "../interpose/driver_error.h"
#include "../interpose/gate.h"
#include "../interpose/log.h"
#include "../interpose/real_driver.h"
#include "block_digest.fatbin.h"

/* Loaded into each device's primary context on first use, before any
 * pause (CUDA's lazy loading would load it at its first launch, inside
 * one); it stays for the life of the context, across driver checkpoints. A
 * driver that refused it (older than the cubins' CUDA 13: R580) is not
 * asked again. Used from the control thread only. */
static CUfunction kernels[GPCK_MAX_DEVICES];
static bool refused[GPCK_MAX_DEVICES];
/* Where the kernel writes its digests: GPCK_MAX_DIGESTS of them, allocated
 * once per device, outside the pool on purpose (it must not show up in
 * the application's allocations or in the image). Allocating and freeing
 * per request would synchronise with the running application. */
static CUdeviceptr scratch[GPCK_MAX_DEVICES];

#define THREADS 512u

int gp_block_digest_load(int device, CUresult *cu_err)
{
    if (device < 0 || device >= (int)GPCK_MAX_DEVICES)
        return -EINVAL;
    if (kernels[device])
        return 0;
    if (refused[device] || !GP_HAS_REAL(cuModuleLoadData) || !GP_HAS_REAL(cuLaunchKernel))
        return -ENOSYS;
    int err = gp_contexts_use_primary(device, cu_err);
    if (err)
        return err;
    CUmodule module;
    CUresult r = GP_CALL(cuModuleLoadData, &module, gp_block_digest_fatbin);
    if (r == CUDA_SUCCESS) {
        r = GP_CALL(cuModuleGetFunction, &kernels[device], module, "gp_block_digest");
        if (r == CUDA_SUCCESS && GP_HAS_REAL(cuFuncLoad))
            r = GP_CALL(cuFuncLoad, kernels[device]);
        if (r != CUDA_SUCCESS && GP_HAS_REAL(cuModuleUnload))
            GP_REAL(cuModuleUnload)(module);
    }
    if (r != CUDA_SUCCESS) {
        kernels[device] = NULL;
        refused[device] = true;
        *cu_err = r;
        GP_WARN("digest", "device %d: the driver will not load the digest kernel (CUresult %d): no incremental images",
                device, (int)r);
        return -ENOSYS;
    }
    return 0;
}

int gp_block_digest(int device, CUstream stream, const struct gpck_digest_range *ranges, uint32_t count,
                    uint64_t block_size, uint64_t *digests, CUresult *cu_err)
{
    if (!block_size || block_size % 8)
        return -EINVAL;
    int err = gp_block_digest_load(device, cu_err);
    if (err)
        return err;
    err = gp_contexts_use_primary(device, cu_err);
    if (err)
        return err;
    uint64_t blocks = 0;
    for (uint32_t i = 0; i < count; i++)
        blocks += (ranges[i].length + block_size - 1) / block_size;
    if (blocks > GPCK_MAX_DIGESTS)
        return -EINVAL;
    CUresult r = CUDA_SUCCESS;
    uint64_t t0 = gp_now_ns();
    if (!scratch[device]) {
        r = GP_CALL(cuMemAlloc_v2, &scratch[device], GPCK_MAX_DIGESTS * sizeof(uint64_t));
        if (r != CUDA_SUCCESS) {
            scratch[device] = 0;
            *cu_err = r;
            return r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
        }
    }
    uint64_t t1 = gp_now_ns();
    /* One launch per range on the shim's own non-blocking stream (a live
     * checkpoint's digests must not wait for the running application's
     * work, nor hold it up), in order; one copy back. */
    unsigned long long block_words = block_size / 8;
    CUdeviceptr at = scratch[device];
    for (uint32_t i = 0; i < count && r == CUDA_SUCCESS; i++) {
        unsigned long long range_addr = ranges[i].addr, nbytes = ranges[i].length, dst = at;
        void *params[] = { &range_addr, &nbytes, &block_words, &dst };
        unsigned grid = (unsigned)((nbytes + block_size - 1) / block_size);
        r = GP_CALL(cuLaunchKernel, kernels[device], grid, 1, 1, THREADS, 1, 1, 0, stream, params, NULL);
        at += grid * sizeof(uint64_t);
    }
    uint64_t t2 = gp_now_ns();
    if (r == CUDA_SUCCESS)
        r = GP_CALL(cuMemcpyDtoHAsync_v2, digests, scratch[device], blocks * sizeof(uint64_t), stream);
    if (r == CUDA_SUCCESS)
        r = GP_CALL(cuStreamSynchronize, stream);
    if (r != CUDA_SUCCESS) {
        *cu_err = r;
        GP_ERROR("digest", "device %d: digests of %u ranges failed (CUresult %d)", device, count, (int)r);
        return -EIO;
    }
    /* Each launch waits for the driver's lock, which the staging's pinning
     * holds on the shim's other threads meanwhile: this says how long. */
    uint64_t t3 = gp_now_ns();
    GP_DEBUG("digest", "device %d: %u ranges, %llu blocks in %.4f s: scratch %.4f s, launches %.4f s, kernels and copy back %.4f s",
             device, count, (unsigned long long)blocks, (t3 - t0) / 1e9, (t1 - t0) / 1e9, (t2 - t1) / 1e9, (t3 - t2) / 1e9);
    return 0;
}
