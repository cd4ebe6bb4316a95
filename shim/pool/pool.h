/* The fixed-address device-memory pool.
 *
 * One virtual range is reserved at a fixed base; device d owns the slice
 * [base + d*slice_size, +slice_size). Physical memory is mapped on demand in
 * chunks (cuMemCreate + cuMemMap + cuMemSetAccess) as allocations touch them,
 * so VA layout is fixed while physical use follows the application. Because
 * placement is deterministic (alloc.h) and the base is fixed, the same
 * program gets the same addresses run after run, and an image restores at
 * identical addresses.
 *
 * The driver is reached only through struct gp_vmm_ops, so the pool carries
 * no link-time CUDA dependency and the shim hands it the real entry points.
 * All functions return 0 or -errno; a failing CUresult is kept in *cu_err
 * where given. Thread-safe: one lock per device slice.
 */
#ifndef GPUCKPT_POOL_H
#define GPUCKPT_POOL_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GP_POOL_MAX_DEVICES 16

struct gp_vmm_ops {
    CUresult (*mem_address_reserve)(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags);
    CUresult (*mem_address_free)(CUdeviceptr ptr, size_t size);
    CUresult (*mem_create)(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop, unsigned long long flags);
    CUresult (*mem_release)(CUmemGenericAllocationHandle handle);
    CUresult (*mem_map)(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags);
    CUresult (*mem_unmap)(CUdeviceptr ptr, size_t size);
    CUresult (*mem_set_access)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);
    CUresult (*mem_get_allocation_granularity)(size_t *granularity, const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags option);
    CUresult (*device_can_access_peer)(int *can, CUdevice dev, CUdevice peer);
};

struct gp_pool_config {
    uint64_t base;         /* fixed virtual base; must be honoured exactly */
    uint64_t slice_size;   /* per device */
    uint64_t chunk_size;   /* physical mapping unit, multiple of the granularity */
    uint64_t retain_bytes; /* free mapped bytes kept per device for fast reuse */
    uint64_t quantum;      /* minimum alignment/size unit of allocations */
    int device_count;
    bool exportable;       /* chunks made exportable as POSIX fds (peek and poke map them) */
};

struct gp_pool_device_usage {
    uint64_t bytes_in_use;
    uint64_t bytes_mapped;
    uint64_t allocations;
};

/* Reserves [base, base + device_count*slice_size). -EADDRNOTAVAIL when the
 * driver places the reservation elsewhere (it is then freed again). */
int gp_pool_init(const struct gp_pool_config *cfg, const struct gp_vmm_ops *ops, CUresult *cu_err);
bool gp_pool_active(void);
const struct gp_pool_config *gp_pool_config(void);

/* Allocates on device; alignment >= quantum. -ENOMEM: slice full or the
 * driver has no physical memory left (*cu_err says which). */
int gp_pool_alloc(int device, uint64_t size, uint64_t align, CUdeviceptr *out, CUresult *cu_err);
/* Frees an allocation starting at ptr. -ENOENT if ptr is not one. */
int gp_pool_free(CUdeviceptr ptr, CUresult *cu_err);
bool gp_pool_contains(CUdeviceptr ptr);
/* The live allocation containing ptr and its device; -ENOENT if none. */
int gp_pool_find(CUdeviceptr ptr, struct gp_extent *ext, int *device);
/* fn(handle, arg) for each chunk under [addr, addr + len), in address
 * order, with the slice locked (none is unmapped meanwhile); the range must
 * lie inside one live allocation (-EFAULT), len > 0. *device and *first
 * (the first chunk's address) say where. Stops at fn's first non-zero. */
int gp_pool_each_chunk(CUdeviceptr addr, uint64_t len, int (*fn)(CUmemGenericAllocationHandle handle, void *arg),
                       void *arg, int *device, uint64_t *first);
/* Live allocations with addr >= start, in address order, at most max;
 * *next_addr is where to continue, *more whether anything is left. */
struct gp_pool_entry { int device; uint64_t addr; uint64_t size; };
int gp_pool_list(uint64_t start, struct gp_pool_entry *out, uint32_t max, uint32_t *count,
                 uint64_t *next_addr, bool *more);
/* True when [addr, addr+len) lies inside one live allocation of device. */
bool gp_pool_range_is_live(int device, uint64_t addr, uint64_t len);
/* True when every chunk under [addr, addr+len) of device's slice is mapped
 * (reading it cannot fault, whether or not an allocation holds it). */
bool gp_pool_range_is_mapped(int device, uint64_t addr, uint64_t len);
/* keep true: from now until the matching false, frees leave their empty
 * chunks mapped, so memory being read outside a pause (a live copy) is
 * never unmapped under the reader; the last false unmaps what frees
 * emptied meanwhile. Calls nest. gp_pool_release_all is not held back. */
void gp_pool_keep_mapped(bool keep);
void gp_pool_usage(int device, struct gp_pool_device_usage *out);
/* Unmaps and releases every chunk (allocations and the reservation stay):
 * the GPU memory goes back to the driver. 0, or -EIO when the driver
 * refused to unmap some chunk (it stays mapped; the rest is released). */
int gp_pool_release_all(uint64_t *bytes_released);
/* Maps physical memory again under every chunk that holds live
 * allocations. On failure everything is released again (-ENOMEM). */
int gp_pool_remap_all(uint64_t *bytes_mapped, CUresult *cu_err);
/* Physical memory for the k-th chunk in use of device (address order, as
 * gp_pool_chunks_in_use lists them), at addr: 0 with a handle the pool then
 * owns, GP_CHUNK_FRESH for fresh memory made as without a source, or -errno
 * (*cu_err where the driver refused). */
#define GP_CHUNK_FRESH 1
typedef int (*gp_chunk_source)(int device, size_t k, uint64_t addr, CUmemGenericAllocationHandle *handle, void *arg,
                               CUresult *cu_err);
/* gp_pool_remap_all with the memory from source (called with the slice's
 * lock held: it must not call back into the pool). */
int gp_pool_remap_all_from(gp_chunk_source source, void *arg, uint64_t *bytes_mapped, CUresult *cu_err);
/* The chunks of device holding live allocations, in address order: their
 * addresses go to addrs (at most max). Returns how many there are. */
size_t gp_pool_chunks_in_use(int device, uint64_t *addrs, size_t max);
/* Whether the count chunks of device from addr on (a chunk's address)
 * all hold live allocations. */
bool gp_pool_chunks_used(int device, uint64_t addr, uint64_t count);
/* Free physical bytes the pool holds mapped on device (allocatable at once). */
uint64_t gp_pool_free_mapped(int device);

#ifdef __cplusplus
}
#endif
#endif
