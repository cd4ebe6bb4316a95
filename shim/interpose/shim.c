/* Shim life cycle. Loading does nothing but read settings: a process that
 * never initialises CUDA (a shell in front of the application, a machine
 * without a driver) behaves exactly as without the shim. The first
 * successful cuInit brings up the pool and the control server. */
#define _GNU_SOURCE
#include "shim.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "cuda_api.h" /* before pool.h: see cuda_api.h */
#include "../pool/pool.h"
#include "device_files.h"
#include "driver_error.h"
#include "gate.h"
#include "gpuckpt_protocol.h"
#include "log.h"
#include "real_driver.h"
#include "routed.h"

static struct gp_config config;
static atomic_int pool_state = GPCK_POOL_NOT_YET;
static int device_count;
static int driver_version;
static atomic_bool cuda_ready;
static atomic_bool passthrough;
static pthread_once_t ready_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct gp_control_hooks *control;

void gp_shim_register_control(const struct gp_control_hooks *hooks)
{
    control = hooks;
}

int gp_shim_reclaim(int device, uint64_t bytes, uint64_t *freed)
{
    *freed = 0;
    return control && control->reclaim ? control->reclaim(device, bytes, freed) : -ENOSYS;
}

const struct gp_config *gp_shim_config(void)
{
    return &config;
}

void gp_shim_info(struct gp_shim_info *out)
{
    out->device_count = device_count;
    out->driver_version = driver_version;
    out->pool_state = atomic_load(&pool_state);
}

bool gp_shim_passthrough(void)
{
    return atomic_load_explicit(&passthrough, memory_order_relaxed);
}

/* The pool's calls that fail a remap or a release: a reply then names them (driver_error.h). */
static CUresult noted_mem_create(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                                 unsigned long long flags)
{
    return GP_CALL(cuMemCreate, handle, size, prop, flags);
}

static CUresult noted_mem_map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                              unsigned long long flags)
{
    return GP_CALL(cuMemMap, ptr, size, offset, handle, flags);
}

static CUresult noted_mem_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    return GP_CALL(cuMemSetAccess, ptr, size, desc, count);
}

static CUresult noted_mem_unmap(CUdeviceptr ptr, size_t size)
{
    return GP_CALL(cuMemUnmap, ptr, size);
}

static void fill_vmm_ops(struct gp_vmm_ops *ops)
{
    ops->mem_address_reserve = GP_REAL(cuMemAddressReserve);
    ops->mem_address_free = GP_REAL(cuMemAddressFree);
    ops->mem_create = noted_mem_create;
    ops->mem_release = GP_REAL(cuMemRelease);
    ops->mem_map = noted_mem_map;
    ops->mem_unmap = noted_mem_unmap;
    ops->mem_set_access = noted_mem_set_access;
    ops->mem_get_allocation_granularity = GP_REAL(cuMemGetAllocationGranularity);
    ops->device_can_access_peer = GP_REAL(cuDeviceCanAccessPeer);
}

/* Every GPU can export memory as a POSIX fd (not so under WSL2 and some
 * vGPUs, where asking for it would fail every cuMemCreate). */
static bool posix_fd_handles(void)
{
    for (int d = 0; d < device_count; d++) {
        CUdevice dev;
        int v = 0;
        if (GP_REAL(cuDeviceGet)(&dev, d) != CUDA_SUCCESS ||
            GP_REAL(cuDeviceGetAttribute)(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev) !=
                CUDA_SUCCESS ||
            !v)
            return false;
    }
    return true;
}

/* Reserves the pool once. A reservation that fails only because no context
 * exists yet is retried at the first allocation; one placed at another
 * address disables the pool for good (pass-through, loudly). */
static void try_pool_init(void)
{
    pthread_mutex_lock(&pool_lock);
    if (atomic_load(&pool_state) != GPCK_POOL_NOT_YET) {
        pthread_mutex_unlock(&pool_lock);
        return;
    }
    struct gp_vmm_ops ops;
    fill_vmm_ops(&ops);
    struct gp_pool_config pc = {
        .base = config.pool_base,
        .slice_size = config.slice_size,
        .chunk_size = config.chunk_size,
        .retain_bytes = config.retain_bytes,
        .quantum = GP_QUANTUM,
        .device_count = device_count,
        .exportable = posix_fd_handles(),
    };
    CUresult cu = CUDA_SUCCESS;
    int err = (ops.mem_address_reserve && GP_HAS_REAL(cuMemCreate)) ? gp_pool_init(&pc, &ops, &cu) : -ENOTSUP;
    if (!err) {
        atomic_store(&pool_state, GPCK_POOL_ACTIVE);
        GP_INFO("pool", "reserved %d x %llu MiB at 0x%llx", device_count,
                (unsigned long long)(config.slice_size >> 20), (unsigned long long)config.pool_base);
    } else if (cu == CUDA_ERROR_INVALID_CONTEXT || cu == CUDA_ERROR_NOT_INITIALIZED) {
        GP_DEBUG("pool", "reservation needs a context; retrying at the first allocation");
    } else {
        atomic_store(&pool_state, GPCK_POOL_DISABLED);
        GP_ERROR("pool", "cannot reserve %d x %llu MiB at 0x%llx (%s, CUresult %d): allocations pass through "
                 "and will not be in images",
                 device_count, (unsigned long long)(config.slice_size >> 20), (unsigned long long)config.pool_base,
                 strerror(-err), (int)cu);
    }
    pthread_mutex_unlock(&pool_lock);
}

bool gp_shim_pool_usable(void)
{
    if (gp_shim_passthrough())
        return false;
    int st = atomic_load(&pool_state);
    if (st == GPCK_POOL_NOT_YET && atomic_load(&cuda_ready)) {
        try_pool_init();
        st = atomic_load(&pool_state);
    }
    return st == GPCK_POOL_ACTIVE;
}

static void on_ready_once(void)
{
    if (GP_REAL(cuDeviceGetCount)(&device_count) != CUDA_SUCCESS || device_count < 1)
        return;
    if (device_count > GP_POOL_MAX_DEVICES) {
        GP_WARN("pool", "%d devices; the pool serves the first %d", device_count, GP_POOL_MAX_DEVICES);
        device_count = GP_POOL_MAX_DEVICES;
    }
    GP_REAL(cuDriverGetVersion)(&driver_version);
    atomic_store(&cuda_ready, true);
    try_pool_init();
    int err = control ? control->start(&config) : -ENOSYS;
    if (err)
        GP_ERROR("control", "control server not started (%s): gpuckpt cannot reach this process", strerror(-err));
}

void gp_shim_on_cuda_ready(void)
{
    if (!gp_shim_passthrough())
        pthread_once(&ready_once, on_ready_once);
}

CUresult gp_routed_cuInit(unsigned int Flags)
{
    CUresult r = GP_REAL(cuInit)(Flags);
    if (r == CUDA_SUCCESS)
        gp_shim_on_cuda_ready();
    return r;
}

/* A child forked from a process that already uses CUDA cannot use the
 * driver, and no controller reaches it: it only passes calls through, and
 * lets go of the parent's device files, so that CRIU can dump it (a
 * DataLoader worker, say). A child of a process that had not started CUDA
 * starts fresh at its own cuInit. */
static void after_fork_in_child(void)
{
    if (atomic_load(&cuda_ready)) {
        atomic_store(&passthrough, true);
        gp_gate_bypass();
        struct gp_released r;
        int err = gp_release_device_files("/dev/nvidia", &r);
        if (err)
            GP_WARN("fork", "cannot let go of the parent's GPU device files (%s): CRIU cannot dump this process",
                    strerror(-err));
        else
            GP_DEBUG("fork", "let go of %d device mappings (%llu KiB) and %d device fds", r.mappings,
                     (unsigned long long)(r.bytes >> 10), r.fds);
    }
    if (control)
        control->forget();
}

__attribute__((constructor)) static void gp_shim_load(void)
{
    gp_log_init();
    if (gp_config_load(&config)) {
        GP_ERROR("config", "bad settings: the shim stays inert");
        atomic_store(&passthrough, true);
        gp_gate_bypass();
        return;
    }
    if (config.disabled) {
        atomic_store(&passthrough, true);
        gp_gate_bypass();
        return;
    }
    pthread_atfork(NULL, NULL, after_fork_in_child);
}

__attribute__((destructor)) static void gp_shim_unload(void)
{
    if (control)
        control->stop();
}
