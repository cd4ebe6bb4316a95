/* Device-memory entry points routed into the pool (cuMemAlloc, cuMemFree,
 * cuMemAllocPitch and the queries that must stay truthful for pool
 * pointers), and the allocations left to the driver, counted. */
#define _GNU_SOURCE
#include <errno.h>

#include "cuda_api.h" /* before pool.h: see cuda_api.h */
#include "cuda_api.h"
#include "../pool/pool.h"
#include "config.h"
#include "log.h"
#include "outside.h"
#include "real_driver.h"
#include "routed.h"
#include "shim.h"

static CUresult cu_of(int err, CUresult cu)
{
    if (!err)
        return CUDA_SUCCESS;
    if (cu != CUDA_SUCCESS && cu != CUDA_ERROR_OUT_OF_MEMORY)
        return cu;
    return err == -ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
}

/* The GPU is out of memory: snapshots gpuckpt holds there give way to the
 * application (they are the first to go, docs/ARCHITECTURE.md), and the
 * allocation is tried again while that freed something. */
static int pool_alloc_reclaiming(CUdevice dev, size_t bytesize, uint64_t align, CUdeviceptr *dptr, CUresult *cu)
{
    int err = gp_pool_alloc(dev, bytesize, align, dptr, cu);
    for (int round = 0; err == -ENOMEM && *cu == CUDA_ERROR_OUT_OF_MEMORY && round < 8; round++) {
        uint64_t freed;
        if (gp_shim_reclaim(dev, bytesize, &freed) != 0 || !freed)
            break;
        GP_INFO("pool", "device %d: out of memory; gpuckpt let %llu MiB of GPU-held snapshots go", (int)dev,
                (unsigned long long)(freed >> 20));
        *cu = CUDA_SUCCESS;
        err = gp_pool_alloc(dev, bytesize, align, dptr, cu);
    }
    return err;
}

static CUresult pool_alloc(CUdeviceptr *dptr, size_t bytesize)
{
    CUdevice dev;
    CUresult r = GP_REAL(cuCtxGetDevice)(&dev);
    if (r != CUDA_SUCCESS)
        return r;
    CUresult cu = CUDA_SUCCESS;
    uint64_t align = bytesize >= GP_LARGE_ALIGN ? GP_LARGE_ALIGN : GP_QUANTUM;
    int err = pool_alloc_reclaiming(dev, bytesize, align, dptr, &cu);
    if (err == -ENOMEM && cu == CUDA_SUCCESS) {
        static int warned;
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            GP_WARN("pool", "device %d: pool slice is full; raise GPUCKPT_POOL_SIZE (gpuckpt run --pool-size)",
                    (int)dev);
    }
    return cu_of(err, cu);
}

CUresult gp_routed_cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    if (!dptr || !bytesize)
        return CUDA_ERROR_INVALID_VALUE;
    if (gp_shim_pool_usable())
        return pool_alloc(dptr, bytesize);
    CUresult r = GP_REAL(cuMemAlloc_v2)(dptr, bytesize);
    if (r == CUDA_SUCCESS && !gp_shim_passthrough())
        gp_outside_add(*dptr, bytesize, GP_OUT_UNROUTED);
    return r;
}

CUresult gp_routed_cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                      unsigned int ElementSizeBytes)
{
    if (!gp_shim_pool_usable()) {
        CUresult r = GP_REAL(cuMemAllocPitch_v2)(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
        if (r == CUDA_SUCCESS && !gp_shim_passthrough())
            gp_outside_add(*dptr, *pPitch * Height, GP_OUT_UNROUTED);
        return r;
    }
    if (!dptr || !pPitch || !WidthInBytes || !Height ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    /* The pitch the driver gives on current GPUs: rows start on 512 bytes. */
    size_t pitch = (WidthInBytes + GP_QUANTUM - 1) & ~(size_t)(GP_QUANTUM - 1);
    if (pitch < WidthInBytes || Height > SIZE_MAX / pitch)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = pool_alloc(dptr, pitch * Height);
    if (r == CUDA_SUCCESS)
        *pPitch = pitch;
    return r;
}

/* cudaFree synchronises the device, and code relies on it: freed memory
 * may be reused at once, so no kernel may still be touching it. */
static CUresult pool_free(CUdeviceptr dptr)
{
    CUresult r = GP_REAL(cuCtxSynchronize)();
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_INVALID_CONTEXT)
        return r;
    return gp_pool_free(dptr, NULL) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult gp_routed_cuMemFree_v2(CUdeviceptr dptr)
{
    if (gp_pool_contains(dptr))
        return pool_free(dptr);
    CUresult r = GP_REAL(cuMemFree_v2)(dptr);
    if (r == CUDA_SUCCESS)
        gp_outside_remove(dptr);
    return r;
}

CUresult gp_routed_cuMemGetInfo_v2(size_t *free, size_t *total)
{
    CUresult r = GP_REAL(cuMemGetInfo_v2)(free, total);
    CUdevice dev;
    if (r != CUDA_SUCCESS || !free || !gp_pool_active() || GP_REAL(cuCtxGetDevice)(&dev) != CUDA_SUCCESS)
        return r;
    /* Chunks the pool keeps mapped but holds no allocation are free to the
     * application: it can allocate them without the driver. */
    *free += gp_pool_free_mapped(dev);
    if (total && *free > *total)
        *free = *total;
    return r;
}

CUresult gp_routed_cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    if (!gp_pool_contains(dptr))
        return GP_REAL(cuMemGetAddressRange_v2)(pbase, psize, dptr);
    struct gp_extent e;
    if (gp_pool_find(dptr, &e, NULL))
        return CUDA_ERROR_NOT_FOUND;
    if (pbase)
        *pbase = e.addr;
    if (psize)
        *psize = e.size;
    return CUDA_SUCCESS;
}

/* The driver sees chunks; the application must see its allocation. */
static void patch_range_attribute(CUpointer_attribute attr, void *data, const struct gp_extent *e)
{
    if (attr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
        *(CUdeviceptr *)data = e->addr;
    else if (attr == CU_POINTER_ATTRIBUTE_RANGE_SIZE)
        *(size_t *)data = e->size;
}

CUresult gp_routed_cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    struct gp_extent e;
    if (!gp_pool_contains(ptr))
        return GP_REAL(cuPointerGetAttribute)(data, attribute, ptr);
    if (gp_pool_find(ptr, &e, NULL))
        return CUDA_ERROR_INVALID_VALUE;
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    if (attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR || attribute == CU_POINTER_ATTRIBUTE_RANGE_SIZE) {
        patch_range_attribute(attribute, data, &e);
        return CUDA_SUCCESS;
    }
    return GP_REAL(cuPointerGetAttribute)(data, attribute, ptr);
}

CUresult gp_routed_cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes, void **data,
                                          CUdeviceptr ptr)
{
    CUresult r = GP_REAL(cuPointerGetAttributes)(numAttributes, attributes, data, ptr);
    struct gp_extent e;
    if (r != CUDA_SUCCESS || !gp_pool_contains(ptr) || gp_pool_find(ptr, &e, NULL))
        return r;
    for (unsigned i = 0; i < numAttributes; i++)
        if (data[i])
            patch_range_attribute(attributes[i], data[i], &e);
    return r;
}

/* ---- allocations the pool does not serve: passed through, counted ---- */

static CUresult counted(CUresult r, const void *ptr, size_t size, enum gp_outside_kind kind)
{
    if (r == CUDA_SUCCESS && ptr && !gp_shim_passthrough())
        gp_outside_add((uint64_t)(uintptr_t)ptr, size, kind);
    return r;
}

CUresult gp_routed_cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    CUresult r = GP_REAL(cuMemAllocManaged)(dptr, bytesize, flags);
    return counted(r, dptr ? (void *)(uintptr_t)*dptr : NULL, bytesize, GP_OUT_MANAGED);
}

CUresult gp_routed_cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    CUresult r = GP_REAL(cuMemAllocAsync)(dptr, bytesize, hStream);
    return counted(r, dptr ? (void *)(uintptr_t)*dptr : NULL, bytesize, GP_OUT_STREAM_ORDERED);
}

CUresult gp_routed_cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    CUresult r = GP_REAL(cuMemAllocAsync_ptsz)(dptr, bytesize, hStream);
    return counted(r, dptr ? (void *)(uintptr_t)*dptr : NULL, bytesize, GP_OUT_STREAM_ORDERED);
}

CUresult gp_routed_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    CUresult r = GP_REAL(cuMemAllocFromPoolAsync)(dptr, bytesize, pool, hStream);
    return counted(r, dptr ? (void *)(uintptr_t)*dptr : NULL, bytesize, GP_OUT_STREAM_ORDERED);
}

CUresult gp_routed_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                CUstream hStream)
{
    CUresult r = GP_REAL(cuMemAllocFromPoolAsync_ptsz)(dptr, bytesize, pool, hStream);
    return counted(r, dptr ? (void *)(uintptr_t)*dptr : NULL, bytesize, GP_OUT_STREAM_ORDERED);
}

/* cudaFreeAsync accepts cudaMalloc memory too: the free takes effect once
 * the stream reaches it, so wait for the stream before returning the range
 * to the pool. */
static CUresult free_async(CUdeviceptr dptr, CUstream hStream, gp_pfn_cuMemFreeAsync real, gp_pfn_cuStreamSynchronize sync)
{
    if (gp_pool_contains(dptr)) {
        CUresult r = sync ? sync(hStream) : GP_REAL(cuStreamSynchronize)(hStream);
        if (r != CUDA_SUCCESS)
            return r;
        return gp_pool_free(dptr, NULL) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    }
    CUresult r = real(dptr, hStream);
    if (r == CUDA_SUCCESS)
        gp_outside_remove(dptr);
    return r;
}

CUresult gp_routed_cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream, GP_REAL(cuMemFreeAsync), GP_REAL(cuStreamSynchronize));
}

CUresult gp_routed_cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream, GP_REAL(cuMemFreeAsync_ptsz), GP_REAL(cuStreamSynchronize_ptsz));
}

CUresult gp_routed_cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    CUresult r = GP_REAL(cuMemAllocHost_v2)(pp, bytesize);
    return counted(r, pp ? *pp : NULL, bytesize, GP_OUT_HOST);
}

CUresult gp_routed_cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    CUresult r = GP_REAL(cuMemHostAlloc)(pp, bytesize, Flags);
    return counted(r, pp ? *pp : NULL, bytesize, GP_OUT_HOST);
}

CUresult gp_routed_cuMemFreeHost(void *p)
{
    CUresult r = GP_REAL(cuMemFreeHost)(p);
    if (r == CUDA_SUCCESS)
        gp_outside_remove((uint64_t)(uintptr_t)p);
    return r;
}
