#define _GNU_SOURCE
#include "block_digest.h"

#include <errno.h>

#include "block_digest.ptx.h"
#include "contexts.h"
#include "gpuckpt_protocol.h"
#include "log.h"
#include "real_driver.h"

/* Loaded into each device's primary context on first use (the driver
 * JIT-compiles the PTX once and caches it); it stays for the life of the
 * context, across driver checkpoints. Used from the control thread only. */
static CUfunction kernels[GPCK_MAX_DEVICES];

#define THREADS 512u

static int load_kernel(int device, CUresult *cu_err)
{
    if (kernels[device])
        return 0;
    CUmodule module;
    CUresult r = GP_REAL(cuModuleLoadData)(&module, gp_block_digest_ptx);
    if (r == CUDA_SUCCESS)
        r = GP_REAL(cuModuleGetFunction)(&kernels[device], module, "gp_block_digest");
    if (r != CUDA_SUCCESS) {
        kernels[device] = NULL;
        *cu_err = r;
        GP_WARN("digest", "device %d: the digest kernel does not load (CUresult %d)", device, (int)r);
        return -ENOSYS;
    }
    return 0;
}

int gp_block_digest(int device, CUdeviceptr addr, uint64_t length, uint64_t block_size, uint64_t *digests,
                    CUresult *cu_err)
{
    if (device < 0 || device >= (int)GPCK_MAX_DEVICES || !length || !block_size || block_size % 8)
        return -EINVAL;
    if (!GP_HAS_REAL(cuModuleLoadData) || !GP_HAS_REAL(cuLaunchKernel))
        return -ENOSYS;
    int err = gp_contexts_use_primary(device, cu_err);
    if (err)
        return err;
    err = load_kernel(device, cu_err);
    if (err)
        return err;
    uint64_t blocks = (length + block_size - 1) / block_size;
    CUdeviceptr out = 0;
    /* Outside the pool on purpose: a few KiB that must not show up in
     * the application's allocations or in the image. */
    CUresult r = GP_REAL(cuMemAlloc_v2)(&out, blocks * sizeof(uint64_t));
    if (r != CUDA_SUCCESS) {
        *cu_err = r;
        return r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
    }
    unsigned long long words = addr, nbytes = length, block_words = block_size / 8, dst = out;
    void *params[] = { &words, &nbytes, &block_words, &dst };
    r = GP_REAL(cuLaunchKernel)(kernels[device], (unsigned)blocks, 1, 1, THREADS, 1, 1, 0, NULL, params, NULL);
    if (r == CUDA_SUCCESS)
        r = GP_REAL(cuMemcpyDtoH_v2)(digests, out, blocks * sizeof(uint64_t));
    GP_REAL(cuMemFree_v2)(out);
    if (r != CUDA_SUCCESS) {
        *cu_err = r;
        GP_ERROR("digest", "device %d: digest of 0x%llx+%llu failed (CUresult %d)", device,
                 (unsigned long long)addr, (unsigned long long)length, (int)r);
        return -EIO;
    }
    return 0;
}
