/* Copies and memsets. Device memory is host memory at the same address, so
 * each is a plain memmove/memset, and the async forms complete before they
 * return (their stream is only checked).
 *
 * What the fake adds is checking, so a wrong pointer is an error code and
 * not a SIGSEGV in the test: the device side of a copy must be CUDA memory
 * (an allocation, a registration, or VMM mappings that allow the access),
 * and any side that touches a VMM reservation must be mapped and
 * accessible there. Plain host memory is fine wherever the API allows it.
 *
 * Each entry point also exists as its _ptds/_ptsz twin where the real
 * driver has one, so cuGetProcAddress's per-thread-stream flag is testable.
 */
#include "fake_internal.h"

#include <string.h>
#include <sys/mman.h>

/* Checks [addr, addr + n) for an access of kind prot. With cuda, the range
 * must be CUDA memory; without, unknown (host) memory passes. */
static CUresult check_range(uint64_t addr, uint64_t n, int prot, int cuda)
{
    if (addr == 0 || addr + n < addr)
        return CUDA_ERROR_INVALID_VALUE;
    fake_lock();
    int v = fake_vmm_check_locked(addr, n, prot);
    int m = v == 0 ? fake_mem_check_locked(addr, n) : 0;
    fake_unlock();
    if (v < 0 || m < 0 || (cuda && v == 0 && m == 0))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* The context, then the stream (when there is one). */
static CUresult check_call(int has_stream, CUstream stream)
{
    struct fake_ctx *ctx;
    CUresult r = fake_ctx_current(&ctx);
    if (r == CUDA_SUCCESS && has_stream)
        r = fake_stream_check(stream);
    return r;
}

static CUresult copy(uint64_t dst, int dst_cuda, uint64_t src, int src_cuda, size_t n, int has_stream,
                     CUstream stream)
{
    CUresult r = check_call(has_stream, stream);
    if (r != CUDA_SUCCESS || n == 0)
        return r;
    if ((r = check_range(src, n, PROT_READ, src_cuda)) != CUDA_SUCCESS ||
        (r = check_range(dst, n, PROT_WRITE, dst_cuda)) != CUDA_SUCCESS)
        return r;
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return CUDA_SUCCESS;
}

static CUresult set(uint64_t dst, unsigned value, size_t n, unsigned width, int has_stream, CUstream stream)
{
    CUresult r = check_call(has_stream, stream);
    if (r != CUDA_SUCCESS || n == 0)
        return r;
    if (dst % width != 0 || n > SIZE_MAX / width)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = check_range(dst, (uint64_t)n * width, PROT_WRITE, 1)) != CUDA_SUCCESS)
        return r;
    if (width == 1) {
        memset((void *)(uintptr_t)dst, (int)(value & 0xff), n);
    } else {
        uint32_t *p = (uint32_t *)(uintptr_t)dst;
        for (size_t i = 0; i < n; i++)
            p[i] = value;
    }
    return CUDA_SUCCESS;
}

#define HOST(p) ((uint64_t)(uintptr_t)(p))

/* ---- synchronous copies ---------------------------------------------------- */

FAKE_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    FAKE_ENTER();
    return copy(dstDevice, 1, HOST(srcHost), 0, ByteCount, 0, NULL);
}
FAKE_LOCAL_ALIAS(cuMemcpyHtoD_v2)

FAKE_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    FAKE_ENTER();
    return copy(dstDevice, 1, HOST(srcHost), 0, ByteCount, 0, NULL);
}
FAKE_LOCAL_ALIAS(cuMemcpyHtoD_v2_ptds)

FAKE_EXPORT CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    FAKE_ENTER();
    return copy(HOST(dstHost), 0, srcDevice, 1, ByteCount, 0, NULL);
}
FAKE_LOCAL_ALIAS(cuMemcpyDtoH_v2)

FAKE_EXPORT CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    FAKE_ENTER();
    return copy(HOST(dstHost), 0, srcDevice, 1, ByteCount, 0, NULL);
}
FAKE_LOCAL_ALIAS(cuMemcpyDtoH_v2_ptds)

FAKE_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    FAKE_ENTER();
    return copy(dstDevice, 1, srcDevice, 1, ByteCount, 0, NULL);
}
FAKE_LOCAL_ALIAS(cuMemcpyDtoD_v2)

FAKE_EXPORT CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    FAKE_ENTER();
    return copy(dstDevice, 1, srcDevice, 1, ByteCount, 0, NULL);
}
FAKE_LOCAL_ALIAS(cuMemcpyDtoD_v2_ptds)

/* Unified addressing: either side may be host memory. */
FAKE_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    FAKE_ENTER();
    return copy(dst, 0, src, 0, ByteCount, 0, NULL);
}
FAKE_LOCAL_ALIAS(cuMemcpy)

FAKE_EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    FAKE_ENTER();
    return copy(dst, 0, src, 0, ByteCount, 0, NULL);
}
FAKE_LOCAL_ALIAS(cuMemcpy_ptds)

/* ---- asynchronous copies (complete before returning) ------------------------ */

FAKE_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                          CUstream hStream)
{
    FAKE_ENTER();
    return copy(dstDevice, 1, HOST(srcHost), 0, ByteCount, 1, hStream);
}
FAKE_LOCAL_ALIAS(cuMemcpyHtoDAsync_v2)

FAKE_EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                               CUstream hStream)
{
    FAKE_ENTER();
    return copy(dstDevice, 1, HOST(srcHost), 0, ByteCount, 1, hStream);
}
FAKE_LOCAL_ALIAS(cuMemcpyHtoDAsync_v2_ptsz)

FAKE_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                          CUstream hStream)
{
    FAKE_ENTER();
    return copy(HOST(dstHost), 0, srcDevice, 1, ByteCount, 1, hStream);
}
FAKE_LOCAL_ALIAS(cuMemcpyDtoHAsync_v2)

FAKE_EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                               CUstream hStream)
{
    FAKE_ENTER();
    return copy(HOST(dstHost), 0, srcDevice, 1, ByteCount, 1, hStream);
}
FAKE_LOCAL_ALIAS(cuMemcpyDtoHAsync_v2_ptsz)

/* Every pair is checked before any byte moves, as the driver refuses a
 * batch whole; the legacy stream is refused, as the driver does. */
FAKE_EXPORT CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                           CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,
                                           CUstream hStream)
{
    FAKE_ENTER();
    if (!count || !dsts || !srcs || !sizes || !attrs || !attrsIdxs || !numAttrs || numAttrs > count ||
        attrsIdxs[0] != 0 || hStream == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < numAttrs; i++)
        if (attrs[i].srcAccessOrder == CU_MEMCPY_SRC_ACCESS_ORDER_INVALID || (i && attrsIdxs[i] <= attrsIdxs[i - 1]))
            return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_call(1, hStream);
    for (size_t i = 0; i < count && r == CUDA_SUCCESS; i++)
        if ((r = check_range(srcs[i], sizes[i], PROT_READ, 0)) == CUDA_SUCCESS)
            r = check_range(dsts[i], sizes[i], PROT_WRITE, 0);
    for (size_t i = 0; i < count && r == CUDA_SUCCESS; i++)
        memmove((void *)(uintptr_t)dsts[i], (const void *)(uintptr_t)srcs[i], sizes[i]);
    return r;
}
FAKE_LOCAL_ALIAS(cuMemcpyBatchAsync_v2)

FAKE_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                          CUstream hStream)
{
    FAKE_ENTER();
    return copy(dstDevice, 1, srcDevice, 1, ByteCount, 1, hStream);
}
FAKE_LOCAL_ALIAS(cuMemcpyDtoDAsync_v2)

FAKE_EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                               CUstream hStream)
{
    FAKE_ENTER();
    return copy(dstDevice, 1, srcDevice, 1, ByteCount, 1, hStream);
}
FAKE_LOCAL_ALIAS(cuMemcpyDtoDAsync_v2_ptsz)

FAKE_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    FAKE_ENTER();
    return copy(dst, 0, src, 0, ByteCount, 1, hStream);
}
FAKE_LOCAL_ALIAS(cuMemcpyAsync)

FAKE_EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    FAKE_ENTER();
    return copy(dst, 0, src, 0, ByteCount, 1, hStream);
}
FAKE_LOCAL_ALIAS(cuMemcpyAsync_ptsz)

/* ---- memsets ------------------------------------------------------------------ */

FAKE_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    FAKE_ENTER();
    return set(dstDevice, uc, N, 1, 0, NULL);
}
FAKE_LOCAL_ALIAS(cuMemsetD8_v2)

FAKE_EXPORT CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    FAKE_ENTER();
    return set(dstDevice, uc, N, 1, 0, NULL);
}
FAKE_LOCAL_ALIAS(cuMemsetD8_v2_ptds)

FAKE_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    FAKE_ENTER();
    return set(dstDevice, ui, N, 4, 0, NULL);
}
FAKE_LOCAL_ALIAS(cuMemsetD32_v2)

FAKE_EXPORT CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    FAKE_ENTER();
    return set(dstDevice, ui, N, 4, 0, NULL);
}
FAKE_LOCAL_ALIAS(cuMemsetD32_v2_ptds)

FAKE_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    FAKE_ENTER();
    return set(dstDevice, uc, N, 1, 1, hStream);
}
FAKE_LOCAL_ALIAS(cuMemsetD8Async)

FAKE_EXPORT CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    FAKE_ENTER();
    return set(dstDevice, uc, N, 1, 1, hStream);
}
FAKE_LOCAL_ALIAS(cuMemsetD8Async_ptsz)

FAKE_EXPORT CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
    FAKE_ENTER();
    return set(dstDevice, ui, N, 4, 1, hStream);
}
FAKE_LOCAL_ALIAS(cuMemsetD32Async)

FAKE_EXPORT CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
    FAKE_ENTER();
    return set(dstDevice, ui, N, 4, 1, hStream);
}
FAKE_LOCAL_ALIAS(cuMemsetD32Async_ptsz)
