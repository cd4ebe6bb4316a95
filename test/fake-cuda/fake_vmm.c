/* Virtual memory management: reservations, physical handles, mappings and
 * access, the part of the driver the shim's fixed-address pool is built on.
 *
 * The model follows the real driver closely enough for the pool to be
 * tested on a CPU:
 *  - a reservation is a PROT_NONE, MAP_NORESERVE anonymous mapping, at the
 *    hint when that range is free, else wherever the kernel puts it;
 *  - a handle (cuMemCreate) is a memfd of its size, charged to its device;
 *  - cuMemMap maps the memfd MAP_SHARED over the reservation but PROT_NONE:
 *    as on a GPU, nothing is accessible until cuMemSetAccess;
 *  - cuMemUnmap puts a PROT_NONE anonymous mapping back, so the reservation
 *    stays and the bytes stay in the memfd for the next cuMemMap;
 *  - a handle lives while it has references (create, retain, import) or
 *    mappings; the last of either frees it.
 * A memfd, rather than anonymous memory, is what makes unmap/remap keep the
 * contents and lets cuMemExportToShareableHandle hand out a real fd.
 */
#include "fake_internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct vmm_handle {
    int fd;
    uint64_t size;
    int device;
    int charged;             /* counted in the device's used bytes */
    unsigned refs;           /* create/retain/import minus release */
    unsigned maps;           /* live mappings */
    CUmemAllocationProp prop;
    unsigned long long id;
};

struct vmm_map {
    uint64_t addr, size, offset;
    struct vmm_handle *h;
    /* CUmemAccess_flags per device; the host protection is the most
     * permissive of them, since every fake device shares this address
     * space. */
    unsigned access[FAKE_MAX_DEVICES];
};

static struct fake_rangeset g_handles; /* registry of struct vmm_handle */
static struct fake_rangeset g_resv;    /* reservations, no payload */
static struct fake_rangeset g_maps;    /* of struct vmm_map */

static const char MEMFD_PREFIX[] = "fake-cuda-dev";

/* ---- helpers ----------------------------------------------------------------- */

static int aligned(uint64_t v)
{
    return v % FAKE_GRANULARITY == 0;
}

static struct vmm_handle *handle_get_locked(CUmemGenericAllocationHandle handle)
{
    void *p = (void *)(uintptr_t)handle;
    return fake_reg_has(&g_handles, p) ? p : NULL;
}

/* Frees a handle nothing refers to any more. */
static void handle_maybe_free_locked(struct vmm_handle *h)
{
    if (h->refs || h->maps)
        return;
    fake_reg_del(&g_handles, h);
    close(h->fd);
    if (h->charged)
        fake_dev_uncharge(h->device, h->size);
    free(h);
}

static int handle_register_locked(struct vmm_handle *h, CUmemGenericAllocationHandle *out)
{
    int err = fake_reg_add(&g_handles, h);
    if (err == 0)
        *out = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return err;
}

/* Turns [addr, addr + size) back into bare reservation. */
static int remap_none(uint64_t addr, uint64_t size)
{
    void *p = mmap((void *)(uintptr_t)addr, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return p == MAP_FAILED ? -errno : 0;
}

static int access_to_prot(unsigned flags)
{
    switch (flags) {
    case CU_MEM_ACCESS_FLAGS_PROT_READ: return PROT_READ;
    case CU_MEM_ACCESS_FLAGS_PROT_READWRITE: return PROT_READ | PROT_WRITE;
    default: return PROT_NONE;
    }
}

static unsigned map_effective_access(const struct vmm_map *m)
{
    unsigned best = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    for (int d = 0; d < FAKE_MAX_DEVICES; d++)
        if (m->access[d] > best)
            best = m->access[d];
    return best;
}

/* Removes mapping i: the range becomes reservation again and the handle
 * loses one mapping. */
static void map_drop_locked(size_t i)
{
    struct vmm_map *m = g_maps.v[i].data;
    remap_none(m->addr, m->size);
    fake_rs_remove(&g_maps, i);
    m->h->maps--;
    handle_maybe_free_locked(m->h);
    free(m);
}

/* Reserves size bytes aligned to align, at hint when that range is free. */
static int reserve_va(uint64_t size, uint64_t align, uint64_t hint, uint64_t *out)
{
    const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    if (hint && hint % align == 0) {
        void *p = mmap((void *)(uintptr_t)hint, size, PROT_NONE, flags | MAP_FIXED_NOREPLACE, -1, 0);
        if (p != MAP_FAILED) {
            if ((uint64_t)(uintptr_t)p == hint) {
                *out = hint;
                return 0;
            }
            /* A kernel older than 4.17 takes the flag as a plain hint. */
            munmap(p, size);
        }
    }
    /* Anywhere: over-reserve by the alignment and trim both ends. */
    uint64_t len = size + align;
    if (len < size)
        return -ENOMEM;
    void *p = mmap(NULL, len, PROT_NONE, flags, -1, 0);
    if (p == MAP_FAILED)
        return -ENOMEM;
    uint64_t start = (uint64_t)(uintptr_t)p;
    uint64_t first = (start + align - 1) & ~(align - 1);
    if (first > start)
        munmap(p, first - start);
    uint64_t tail = start + len - (first + size);
    if (tail)
        munmap((void *)(uintptr_t)(first + size), tail);
    *out = first;
    return 0;
}

/* The device a memfd of ours was made for, from its name; -EINVAL for any
 * other file. */
static int memfd_device(int fd)
{
    char link[64], target[256];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof(target) - 1);
    if (n < 0)
        return -errno;
    target[n] = '\0';
    const char *name = strstr(target, MEMFD_PREFIX);
    int dev;
    if (strncmp(target, "/memfd:", 7) != 0 || !name ||
        sscanf(name + sizeof(MEMFD_PREFIX) - 1, "%d", &dev) != 1 || !fake_dev_valid(dev))
        return -EINVAL;
    return dev;
}

/* ---- queries for fake_mem.c and fake_copy.c --------------------------------- */

int fake_vmm_lookup_locked(uint64_t addr, struct fake_vmm_info *info)
{
    long r = fake_rs_find(&g_resv, addr);
    if (r < 0)
        return -ENOENT;
    memset(info, 0, sizeof(*info));
    info->reserved = 1;
    info->resv_start = g_resv.v[r].start;
    info->resv_size = g_resv.v[r].size;
    long i = fake_rs_find(&g_maps, addr);
    if (i >= 0) {
        const struct vmm_map *m = g_maps.v[i].data;
        info->mapped = 1;
        info->map_start = m->addr;
        info->map_size = m->size;
        info->device = m->h->device;
        info->buffer_id = m->h->id;
        info->handle_types = m->h->prop.requestedHandleTypes;
        info->access = map_effective_access(m);
    }
    return 0;
}

int fake_vmm_check_locked(uint64_t addr, uint64_t n, int prot)
{
    if (!fake_rs_overlaps(&g_resv, addr, n))
        return 0;
    size_t first, count;
    if (fake_rs_cover(&g_maps, addr, n, 0, &first, &count) != 0)
        return -EFAULT;
    for (size_t i = first; i < first + count; i++) {
        const struct vmm_map *m = g_maps.v[i].data;
        if ((access_to_prot(map_effective_access(m)) & prot) != prot)
            return -EFAULT;
    }
    return 1;
}

/* ---- entry points -------------------------------------------------------------- */

FAKE_EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                                   CUmemAllocationGranularity_flags option)
{
    FAKE_ENTER();
    if (!granularity || !prop ||
        (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE && !fake_dev_valid(prop->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    *granularity = FAKE_GRANULARITY;
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuMemGetAllocationGranularity)

FAKE_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                         unsigned long long flags)
{
    FAKE_ENTER();
    if (!ptr || size == 0 || !aligned(size) || flags != 0 || (alignment & (alignment - 1)) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t align = alignment > FAKE_GRANULARITY ? alignment : FAKE_GRANULARITY;
    uint64_t base;
    if (reserve_va(size, align, addr, &base) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fake_lock();
    int err = fake_rs_insert(&g_resv, base, size, NULL);
    fake_unlock();
    if (err) {
        munmap((void *)(uintptr_t)base, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ptr = base;
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuMemAddressReserve)

/* ptr and size must name a whole reservation. Mappings still inside are
 * dropped first (the real driver accepts this too). */
FAKE_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    FAKE_ENTER();
    fake_lock();
    long r = fake_rs_find_start(&g_resv, ptr);
    if (r < 0 || g_resv.v[r].size != size) {
        fake_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    size_t i = fake_rs_lower(&g_maps, ptr);
    while (i < g_maps.n && g_maps.v[i].start < ptr + size)
        map_drop_locked(i);
    fake_rs_remove(&g_resv, (size_t)r);
    munmap((void *)(uintptr_t)ptr, size);
    fake_unlock();
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuMemAddressFree)

/* Fills new physical memory with a pattern: a real GPU does not promise
 * zeros, so whatever must be zero afterwards has to be written. */
static int make_dirty(int fd, size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return -1;
    memset(p, 0xA5, size);
    munmap(p, size);
    return 0;
}

FAKE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                 const CUmemAllocationProp *prop, unsigned long long flags)
{
    FAKE_ENTER();
    if (!handle || !prop || flags != 0 || size == 0 || !aligned(size) ||
        prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    /* Host-located VMM memory and other export kinds are not emulated. */
    if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        (prop->requestedHandleTypes & ~CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_NOT_SUPPORTED;
    int dev = prop->location.id;
    if (!fake_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (fake_dev_charge(dev, size) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;

    char name[32];
    snprintf(name, sizeof(name), "%s%d", MEMFD_PREFIX, dev);
    struct vmm_handle *h = calloc(1, sizeof(*h));
    int fd = h ? memfd_create(name, MFD_CLOEXEC) : -1;
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0 || (fake_config()->dirty_memory && make_dirty(fd, size) != 0)) {
        if (fd >= 0)
            close(fd);
        free(h);
        fake_dev_uncharge(dev, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *h = (struct vmm_handle){ .fd = fd, .size = size, .device = dev, .charged = 1, .refs = 1,
                              .prop = *prop, .id = fake_next_id() };
    fake_lock();
    int err = handle_register_locked(h, handle);
    fake_unlock();
    if (err) {
        close(fd);
        free(h);
        fake_dev_uncharge(dev, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuMemCreate)

FAKE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    FAKE_ENTER();
    fake_lock();
    struct vmm_handle *h = handle_get_locked(handle);
    if (!h || h->refs == 0) {
        fake_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    h->refs--;
    handle_maybe_free_locked(h);
    fake_unlock();
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuMemRelease)

/* The range must lie inside one reservation and overlap no mapping. */
FAKE_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                              unsigned long long flags)
{
    FAKE_ENTER();
    if (flags != 0 || size == 0 || !aligned(ptr) || !aligned(size) || !aligned(offset))
        return CUDA_ERROR_INVALID_VALUE;
    fake_lock();
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    struct vmm_handle *h = handle_get_locked(handle);
    long ri = fake_rs_find(&g_resv, ptr);
    if (!h || offset > h->size || size > h->size - offset || ri < 0 ||
        ptr + size > g_resv.v[ri].start + g_resv.v[ri].size || fake_rs_overlaps(&g_maps, ptr, size))
        goto out;
    r = CUDA_ERROR_OUT_OF_MEMORY;
    struct vmm_map *m = calloc(1, sizeof(*m));
    if (!m)
        goto out;
    *m = (struct vmm_map){ .addr = ptr, .size = size, .offset = offset, .h = h };
    /* PROT_NONE: like the real driver, no access before cuMemSetAccess. */
    void *p = mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd, (off_t)offset);
    if (p == MAP_FAILED) {
        remap_none(ptr, size);
        free(m);
        goto out;
    }
    if (fake_rs_insert(&g_maps, ptr, size, m) != 0) {
        remap_none(ptr, size);
        free(m);
        goto out;
    }
    h->maps++;
    r = CUDA_SUCCESS;
out:
    fake_unlock();
    return r;
}
FAKE_LOCAL_ALIAS(cuMemMap)

/* The range must be exactly one or more whole, adjacent mappings: the real
 * driver cannot unmap part of a mapping either. */
FAKE_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    FAKE_ENTER();
    fake_lock();
    size_t first, count;
    if (fake_rs_cover(&g_maps, ptr, size, 1, &first, &count) != 0) {
        fake_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    while (count--)
        map_drop_locked(first);
    fake_unlock();
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuMemUnmap)

/* The range must be whole adjacent mappings (the driver documents "a fully
 * mapped address range containing all allocations"). Access is kept per
 * device; the host protection is the most permissive device's. */
FAKE_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    FAKE_ENTER();
    if (!desc || count == 0 || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        unsigned f = desc[i].flags;
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            (f != CU_MEM_ACCESS_FLAGS_PROT_NONE && f != CU_MEM_ACCESS_FLAGS_PROT_READ &&
             f != CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
            return CUDA_ERROR_INVALID_VALUE;
        if (!fake_dev_valid(desc[i].location.id))
            return CUDA_ERROR_INVALID_DEVICE;
    }
    fake_lock();
    size_t first, n;
    if (fake_rs_cover(&g_maps, ptr, size, 1, &first, &n) != 0) {
        fake_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUresult r = CUDA_SUCCESS;
    for (size_t i = first; i < first + n; i++) {
        struct vmm_map *m = g_maps.v[i].data;
        for (size_t k = 0; k < count; k++)
            m->access[desc[k].location.id] = desc[k].flags;
        if (mprotect((void *)(uintptr_t)m->addr, m->size, access_to_prot(map_effective_access(m))) != 0)
            r = CUDA_ERROR_UNKNOWN;
    }
    fake_unlock();
    return r;
}
FAKE_LOCAL_ALIAS(cuMemSetAccess)

FAKE_EXPORT CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
    FAKE_ENTER();
    if (!flags || !location || location->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fake_dev_valid(location->id))
        return CUDA_ERROR_INVALID_DEVICE;
    fake_lock();
    long i = fake_rs_find(&g_maps, ptr);
    if (i >= 0)
        *flags = ((struct vmm_map *)g_maps.v[i].data)->access[location->id];
    fake_unlock();
    return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
FAKE_LOCAL_ALIAS(cuMemGetAccess)

FAKE_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                            CUmemGenericAllocationHandle handle)
{
    FAKE_ENTER();
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    fake_lock();
    struct vmm_handle *h = handle_get_locked(handle);
    if (h)
        *prop = h->prop;
    fake_unlock();
    return h ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
FAKE_LOCAL_ALIAS(cuMemGetAllocationPropertiesFromHandle)

/* Any address inside a mapping gives that mapping's handle, with one more
 * reference for the caller to release. */
FAKE_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    FAKE_ENTER();
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    fake_lock();
    long i = fake_rs_find(&g_maps, (uint64_t)(uintptr_t)addr);
    if (i >= 0) {
        struct vmm_handle *h = ((struct vmm_map *)g_maps.v[i].data)->h;
        h->refs++;
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
    }
    fake_unlock();
    return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
FAKE_LOCAL_ALIAS(cuMemRetainAllocationHandle)

/* POSIX fd only: a dup of the memfd, which the caller owns. The handle must
 * have asked for that type at cuMemCreate. */
FAKE_EXPORT CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                                  CUmemAllocationHandleType handleType, unsigned long long flags)
{
    FAKE_ENTER();
    if (!shareableHandle || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    fake_lock();
    struct vmm_handle *h = handle_get_locked(handle);
    int fd = -1;
    if (h && (h->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        fd = dup(h->fd);
    fake_unlock();
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE; /* unknown handle, not exportable, or no fd left */
    *(int *)shareableHandle = fd;
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuMemExportToShareableHandle)

/* Takes an fd from cuMemExportToShareableHandle (this process or another).
 * The caller keeps its fd. Imported memory is not charged again: the
 * exporter already counts it. */
FAKE_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                                    CUmemAllocationHandleType shHandleType)
{
    FAKE_ENTER();
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    int src = (int)(intptr_t)osHandle;
    struct stat st;
    int dev = memfd_device(src);
    if (dev < 0 || fstat(src, &st) != 0 || st.st_size <= 0 || !aligned((uint64_t)st.st_size))
        return CUDA_ERROR_INVALID_VALUE;
    struct vmm_handle *h = calloc(1, sizeof(*h));
    int fd = h ? fcntl(src, F_DUPFD_CLOEXEC, 0) : -1;
    if (fd < 0) {
        free(h);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *h = (struct vmm_handle){ .fd = fd, .size = (uint64_t)st.st_size, .device = dev, .refs = 1,
                              .id = fake_next_id() };
    h->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    h->prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    h->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    h->prop.location.id = dev;
    fake_lock();
    int err = handle_register_locked(h, handle);
    fake_unlock();
    if (err) {
        close(fd);
        free(h);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuMemImportFromShareableHandle)
