/* Classic memory: cuMemAlloc and friends, host allocations, host
 * registration, and the queries that answer for any CUDA pointer
 * (cuMemGetAddressRange, cuPointerGetAttribute(s), cuMemGetInfo).
 *
 * Every allocation is its own anonymous mmap, so device pointers are host
 * pointers at the same address and a test can write through them. Device and
 * managed bytes are charged to the context's device; host allocations are
 * not. Each allocation and registration belongs to the context that made it
 * and goes away with that context, as with the real driver.
 */
#include "fake_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum alloc_kind {
    KIND_DEVICE,  /* cuMemAlloc, cuMemAllocPitch, cuMemAllocAsync */
    KIND_MANAGED, /* cuMemAllocManaged */
    KIND_HOST,    /* cuMemAllocHost, cuMemHostAlloc */
};

struct alloc {
    uint64_t addr;
    uint64_t size;   /* as requested (pitch * height for pitched) */
    uint64_t maplen; /* size rounded up to pages, what was mmap'd */
    enum alloc_kind kind;
    int device;
    struct fake_ctx *ctx;
    unsigned long long buffer_id;
};

struct hostreg {
    uint64_t addr, size;
    int device;
    struct fake_ctx *ctx;
    unsigned long long buffer_id;
};

static struct fake_rangeset g_allocs;  /* of struct alloc, keyed [addr, size) */
static struct fake_rangeset g_hostregs; /* of struct hostreg */

/* ---- allocation table -------------------------------------------------------- */

static uint64_t page_round(uint64_t n)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    return (n + page - 1) & ~(page - 1);
}

/* Allocates for the current context. CUresult because every caller returns
 * it as is. */
static CUresult alloc_new(enum alloc_kind kind, uint64_t size, uint64_t *out)
{
    struct fake_ctx *ctx;
    CUresult r = fake_ctx_current(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;

    int charged = kind != KIND_HOST;
    if (charged && fake_dev_charge(ctx->device, size) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;

    struct alloc *a = calloc(1, sizeof(*a));
    void *p = MAP_FAILED;
    if (a) {
        a->maplen = page_round(size);
        p = mmap(NULL, a->maplen, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    }
    if (p == MAP_FAILED) {
        free(a);
        if (charged)
            fake_dev_uncharge(ctx->device, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->addr = (uint64_t)(uintptr_t)p;
    a->size = size;
    a->kind = kind;
    a->device = ctx->device;
    a->ctx = ctx;
    a->buffer_id = fake_next_id();

    fake_lock();
    int err = fake_rs_insert(&g_allocs, a->addr, a->size, a);
    fake_unlock();
    if (err) {
        munmap(p, a->maplen);
        if (charged)
            fake_dev_uncharge(ctx->device, size);
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = a->addr;
    return CUDA_SUCCESS;
}

static void alloc_destroy(struct alloc *a)
{
    munmap((void *)(uintptr_t)a->addr, a->maplen);
    if (a->kind != KIND_HOST)
        fake_dev_uncharge(a->device, a->size);
    free(a);
}

/* Frees the allocation starting at addr if its kind is allowed by host
 * (1: host only, 0: device and managed only). */
static CUresult alloc_free(uint64_t addr, int host)
{
    fake_lock();
    long i = fake_rs_find_start(&g_allocs, addr);
    struct alloc *a = i >= 0 ? g_allocs.v[i].data : NULL;
    if (!a || (a->kind == KIND_HOST) != host) {
        fake_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    fake_rs_remove(&g_allocs, (size_t)i);
    fake_unlock();
    alloc_destroy(a);
    return CUDA_SUCCESS;
}

void fake_mem_ctx_gone_locked(struct fake_ctx *ctx)
{
    for (size_t i = 0; i < g_allocs.n;) {
        struct alloc *a = g_allocs.v[i].data;
        if (a->ctx != ctx) {
            i++;
            continue;
        }
        fake_rs_remove(&g_allocs, i);
        alloc_destroy(a);
    }
    for (size_t i = 0; i < g_hostregs.n;) {
        struct hostreg *h = g_hostregs.v[i].data;
        if (h->ctx != ctx) {
            i++;
            continue;
        }
        fake_rs_remove(&g_hostregs, i);
        free(h);
    }
}

static int inside(const struct fake_rangeset *s, uint64_t addr, uint64_t n)
{
    long i = fake_rs_find(s, addr);
    if (i >= 0)
        return addr + n <= s->v[i].start + s->v[i].size ? 1 : -EFAULT;
    return fake_rs_overlaps(s, addr, n) ? -EFAULT : 0;
}

int fake_mem_check_locked(uint64_t addr, uint64_t n)
{
    int r = inside(&g_allocs, addr, n);
    if (r != 0)
        return r;
    return inside(&g_hostregs, addr, n);
}

/* ---- allocation entry points ------------------------------------------------- */

FAKE_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    FAKE_ENTER();
    if (!free_bytes || !total_bytes)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_ctx *ctx;
    CUresult r = fake_ctx_current(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t f, t;
    fake_dev_meminfo(ctx->device, &f, &t);
    *free_bytes = f;
    *total_bytes = t;
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuMemGetInfo_v2)

FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    FAKE_ENTER();
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t addr;
    CUresult r = alloc_new(KIND_DEVICE, bytesize, &addr);
    if (r == CUDA_SUCCESS)
        *dptr = addr;
    return r;
}
FAKE_LOCAL_ALIAS(cuMemAlloc_v2)

/* Pitch is the width rounded up to 512 bytes. */
FAKE_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                        size_t Height, unsigned int ElementSizeBytes)
{
    FAKE_ENTER();
    if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t pitch = (WidthInBytes + 511) & ~(size_t)511;
    if (Height > SIZE_MAX / pitch)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t addr;
    CUresult r = alloc_new(KIND_DEVICE, (uint64_t)pitch * Height, &addr);
    if (r == CUDA_SUCCESS) {
        *dptr = addr;
        *pPitch = pitch;
    }
    return r;
}
FAKE_LOCAL_ALIAS(cuMemAllocPitch_v2)

/* Like the real driver, freeing 0 succeeds. */
FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    FAKE_ENTER();
    if (dptr == 0)
        return CUDA_SUCCESS;
    return alloc_free(dptr, 0);
}
FAKE_LOCAL_ALIAS(cuMemFree_v2)

FAKE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    FAKE_ENTER();
    if (!dptr || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t addr;
    CUresult r = alloc_new(KIND_MANAGED, bytesize, &addr);
    if (r == CUDA_SUCCESS)
        *dptr = addr;
    return r;
}
FAKE_LOCAL_ALIAS(cuMemAllocManaged)

static CUresult host_alloc(void **pp, size_t bytesize)
{
    if (!pp)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t addr;
    CUresult r = alloc_new(KIND_HOST, bytesize, &addr);
    if (r == CUDA_SUCCESS)
        *pp = (void *)(uintptr_t)addr;
    return r;
}

FAKE_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    FAKE_ENTER();
    return host_alloc(pp, bytesize);
}
FAKE_LOCAL_ALIAS(cuMemAllocHost_v2)

FAKE_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    FAKE_ENTER();
    if (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                            CU_MEMHOSTALLOC_WRITECOMBINED))
        return CUDA_ERROR_INVALID_VALUE;
    return host_alloc(pp, bytesize);
}
FAKE_LOCAL_ALIAS(cuMemHostAlloc)

/* Like the real driver, freeing NULL succeeds. */
FAKE_EXPORT CUresult cuMemFreeHost(void *p)
{
    FAKE_ENTER();
    if (!p)
        return CUDA_SUCCESS;
    return alloc_free((uint64_t)(uintptr_t)p, 1);
}
FAKE_LOCAL_ALIAS(cuMemFreeHost)

/* Stream-ordered allocation completes at once: the stream is only checked. */
static CUresult alloc_async(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fake_stream_check(hStream);
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t addr;
    r = alloc_new(KIND_DEVICE, bytesize, &addr);
    if (r == CUDA_SUCCESS)
        *dptr = addr;
    return r;
}

static CUresult free_async(CUdeviceptr dptr, CUstream hStream)
{
    CUresult r = fake_stream_check(hStream);
    if (r != CUDA_SUCCESS)
        return r;
    return alloc_free(dptr, 0);
}

FAKE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    FAKE_ENTER();
    return alloc_async(dptr, bytesize, hStream);
}
FAKE_LOCAL_ALIAS(cuMemAllocAsync)

FAKE_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    FAKE_ENTER();
    return alloc_async(dptr, bytesize, hStream);
}
FAKE_LOCAL_ALIAS(cuMemAllocAsync_ptsz)

FAKE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    FAKE_ENTER();
    return free_async(dptr, hStream);
}
FAKE_LOCAL_ALIAS(cuMemFreeAsync)

FAKE_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    FAKE_ENTER();
    return free_async(dptr, hStream);
}
FAKE_LOCAL_ALIAS(cuMemFreeAsync_ptsz)

/* ---- host registration ------------------------------------------------------- */

static CUresult host_register(void *p, size_t bytesize, unsigned int Flags)
{
    if (!p || bytesize == 0 ||
        (Flags & ~(unsigned)(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                             CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY)))
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_ctx *ctx;
    CUresult r = fake_ctx_current(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t addr = (uint64_t)(uintptr_t)p;
    if (addr + bytesize < addr)
        return CUDA_ERROR_INVALID_VALUE;
    struct hostreg *h = calloc(1, sizeof(*h));
    if (!h)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *h = (struct hostreg){ .addr = addr, .size = bytesize, .device = ctx->device, .ctx = ctx,
                           .buffer_id = fake_next_id() };
    fake_lock();
    /* Pinned host allocations count as registered already. */
    int err = fake_rs_overlaps(&g_allocs, addr, bytesize) ? -EEXIST
                                                          : fake_rs_insert(&g_hostregs, addr, bytesize, h);
    fake_unlock();
    if (err) {
        free(h);
        return err == -EEXIST ? CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED : CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    FAKE_ENTER();
    return host_register(p, bytesize, Flags);
}
FAKE_LOCAL_ALIAS(cuMemHostRegister)

FAKE_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    FAKE_ENTER();
    return host_register(p, bytesize, Flags);
}
FAKE_LOCAL_ALIAS(cuMemHostRegister_v2)

/* p must be the start of a registration; NULL is CUDA_ERROR_INVALID_VALUE,
 * as with the real driver. */
FAKE_EXPORT CUresult cuMemHostUnregister(void *p)
{
    FAKE_ENTER();
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    fake_lock();
    long i = fake_rs_find_start(&g_hostregs, (uint64_t)(uintptr_t)p);
    struct hostreg *h = i >= 0 ? g_hostregs.v[i].data : NULL;
    if (h)
        fake_rs_remove(&g_hostregs, (size_t)i);
    fake_unlock();
    if (!h)
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    free(h);
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuMemHostUnregister)

/* Same address on both sides, as with UVA. */
FAKE_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    FAKE_ENTER();
    if (!pdptr || !p || Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t addr = (uint64_t)(uintptr_t)p;
    fake_lock();
    long i = fake_rs_find(&g_allocs, addr);
    int ok = (i >= 0 && ((struct alloc *)g_allocs.v[i].data)->kind == KIND_HOST) ||
             fake_rs_find(&g_hostregs, addr) >= 0;
    fake_unlock();
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    *pdptr = addr;
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuMemHostGetDevicePointer_v2)

/* ---- pointer queries --------------------------------------------------------- */

enum ptr_kind {
    PK_NONE,          /* not CUDA memory */
    PK_VMM_UNMAPPED,  /* inside a reservation, nothing mapped there */
    PK_VMM,
    PK_DEVICE,
    PK_MANAGED,
    PK_HOST,          /* cuMemAllocHost / cuMemHostAlloc */
    PK_HOSTREG,       /* cuMemHostRegister */
};

struct ptr_info {
    enum ptr_kind kind;
    struct fake_ctx *ctx;
    int device;
    uint64_t range_start, range_size; /* RANGE_*: allocation or reservation */
    uint64_t map_start, map_size;     /* MAPPING_*: allocation or mapped piece */
    unsigned long long buffer_id;
    unsigned handle_types;
    unsigned access;                  /* CU_POINTER_ATTRIBUTE_ACCESS_FLAG_* */
};

static void ptr_lookup_locked(uint64_t p, struct ptr_info *pi)
{
    memset(pi, 0, sizeof(*pi));
    struct fake_vmm_info v;
    if (fake_vmm_lookup_locked(p, &v) == 0) {
        /* RANGE_* name the reservation, as the driver documents; the
         * mapped piece is MAPPING_* and cuMemGetAddressRange. */
        pi->range_start = v.resv_start;
        pi->range_size = v.resv_size;
        if (!v.mapped) {
            pi->kind = PK_VMM_UNMAPPED;
            return;
        }
        pi->kind = PK_VMM;
        pi->device = v.device;
        pi->ctx = fake_ctx_primary(v.device);
        pi->map_start = v.map_start;
        pi->map_size = v.map_size;
        pi->buffer_id = v.buffer_id;
        pi->handle_types = (unsigned)v.handle_types;
        pi->access = v.access;
        return;
    }
    long i = fake_rs_find(&g_allocs, p);
    if (i >= 0) {
        const struct alloc *a = g_allocs.v[i].data;
        pi->kind = a->kind == KIND_DEVICE ? PK_DEVICE : a->kind == KIND_MANAGED ? PK_MANAGED : PK_HOST;
        pi->ctx = a->ctx;
        pi->device = a->device;
        pi->range_start = pi->map_start = a->addr;
        pi->range_size = pi->map_size = a->size;
        pi->buffer_id = a->buffer_id;
        pi->access = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
        return;
    }
    i = fake_rs_find(&g_hostregs, p);
    if (i >= 0) {
        const struct hostreg *h = g_hostregs.v[i].data;
        pi->kind = PK_HOSTREG;
        pi->ctx = h->ctx;
        pi->device = h->device;
        pi->range_start = pi->map_start = h->addr;
        pi->range_size = pi->map_size = h->size;
        pi->buffer_id = h->buffer_id;
        pi->access = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
    }
}

/* Bytes written for an attribute, 0 for one this fake does not know. */
static size_t attr_size(CUpointer_attribute a)
{
    switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: return sizeof(CUcontext);
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: return sizeof(unsigned int);
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: return sizeof(CUdeviceptr);
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: return sizeof(void *);
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_MAPPED:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
        return sizeof(unsigned int);
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        return sizeof(unsigned long long);
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        return sizeof(CUdeviceptr);
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        return sizeof(size_t);
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: return sizeof(CUmemoryPool);
    default: return 0;
    }
}

#define PUT(type, value)                 \
    do {                                 \
        type v_ = (type)(value);         \
        memcpy(data, &v_, sizeof(v_));   \
        return CUDA_SUCCESS;             \
    } while (0)

/* One attribute of a looked-up pointer. */
static CUresult ptr_attr(const struct ptr_info *pi, CUpointer_attribute a, uint64_t p, void *data)
{
    if (attr_size(a) == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (pi->kind == PK_NONE)
        return CUDA_ERROR_INVALID_VALUE;
    if (pi->kind == PK_VMM_UNMAPPED) {
        /* Only the reservation itself is known about such an address. */
        switch (a) {
        case CU_POINTER_ATTRIBUTE_MAPPED: PUT(unsigned int, 0);
        case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: PUT(CUdeviceptr, pi->range_start);
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE: PUT(size_t, pi->range_size);
        default: return CUDA_ERROR_INVALID_VALUE;
        }
    }
    int device_only = pi->kind == PK_VMM || pi->kind == PK_DEVICE;
    switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: PUT(CUcontext, pi->ctx);
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        PUT(unsigned int, pi->kind == PK_HOST || pi->kind == PK_HOSTREG ? CU_MEMORYTYPE_HOST
                                                                        : CU_MEMORYTYPE_DEVICE);
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: PUT(CUdeviceptr, p);
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (device_only)
            return CUDA_ERROR_INVALID_VALUE;
        PUT(void *, (void *)(uintptr_t)p);
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: PUT(unsigned int, 0);
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: PUT(unsigned long long, pi->buffer_id);
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: PUT(unsigned long long, pi->buffer_id);
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: PUT(unsigned int, pi->kind == PK_MANAGED);
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: PUT(int, pi->device);
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: PUT(unsigned int, pi->kind == PK_DEVICE);
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: PUT(CUdeviceptr, pi->range_start);
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: PUT(size_t, pi->range_size);
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: PUT(CUdeviceptr, pi->map_start);
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: PUT(size_t, pi->map_size);
    case CU_POINTER_ATTRIBUTE_MAPPED: PUT(unsigned int, 1);
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: PUT(unsigned int, pi->handle_types);
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: PUT(unsigned int, pi->access);
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: PUT(unsigned int, 0);
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: PUT(unsigned int, 0);
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: PUT(CUmemoryPool, NULL);
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}
#undef PUT

FAKE_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    FAKE_ENTER();
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    struct ptr_info pi;
    fake_lock();
    ptr_lookup_locked(ptr, &pi);
    fake_unlock();
    return ptr_attr(&pi, attribute, ptr, data);
}
FAKE_LOCAL_ALIAS(cuPointerGetAttribute)

/* Unlike the singular form, an unknown pointer (or an attribute that does
 * not apply to it) gives zeroes and success. */
FAKE_EXPORT CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                                            void **data, CUdeviceptr ptr)
{
    FAKE_ENTER();
    if (numAttributes == 0 || !attributes || !data)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < numAttributes; i++)
        if (!data[i] || attr_size(attributes[i]) == 0)
            return CUDA_ERROR_INVALID_VALUE;
    struct ptr_info pi;
    fake_lock();
    ptr_lookup_locked(ptr, &pi);
    fake_unlock();
    for (unsigned i = 0; i < numAttributes; i++)
        if (ptr_attr(&pi, attributes[i], ptr, data[i]) != CUDA_SUCCESS)
            memset(data[i], 0, attr_size(attributes[i]));
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuPointerGetAttributes)

/* Classic allocations answer with the allocation, VMM addresses with the
 * mapped piece they lie in (what NCCL and friends rely on to unmap). */
FAKE_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    FAKE_ENTER();
    struct ptr_info pi;
    fake_lock();
    ptr_lookup_locked(dptr, &pi);
    fake_unlock();
    if (pi.kind == PK_NONE || pi.kind == PK_VMM_UNMAPPED || pi.kind == PK_HOSTREG)
        return CUDA_ERROR_NOT_FOUND;
    if (pbase)
        *pbase = pi.map_start;
    if (psize)
        *psize = pi.map_size;
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuMemGetAddressRange_v2)
