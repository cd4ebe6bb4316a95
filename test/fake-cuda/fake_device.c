/* Devices, primary contexts, created contexts and the per-thread context
 * stack.
 *
 * Devices are static: FAKE_CUDA_DEVICES of them, each with FAKE_CUDA_MEM_MB of
 * "memory" that is only a byte counter (the bytes themselves are host memory,
 * see fake_mem.c and fake_vmm.c). Each device has one primary context object
 * for the life of the process; retain/release only moves its refcount, and
 * dropping to zero frees what it owned, as the real driver does.
 *
 * Context objects are never freed, even when destroyed: a stale CUcontext
 * then still points at a struct marked dead, so the fake can answer
 * CUDA_ERROR_CONTEXT_IS_DESTROYED instead of reading freed memory.
 */
#include "fake_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CTX_STACK_MAX 128
/* A real device's default stack limit; the threads are a scaled-down
 * stand-in for the 270,336 an H200 holds (132 SMs of 2048). */
#define FAKE_DEFAULT_STACK 1024
#define FAKE_STACK_THREADS 8192
/* What cuCtxGetApiVersion answers on current drivers. */
#define FAKE_CTX_API_VERSION 3020

struct fake_device {
    atomic_ullong used;      /* bytes charged by fake_dev_charge */
    struct fake_ctx primary;
    atomic_int prim_refs;    /* changed under fake_lock, read without */
    atomic_uint prim_flags;
};

static struct fake_device g_dev[FAKE_MAX_DEVICES];
static pthread_once_t g_dev_once = PTHREAD_ONCE_INIT;
static struct fake_rangeset g_ctxs; /* created contexts, live and dead */

static __thread struct fake_ctx *t_stack[CTX_STACK_MAX];
static __thread int t_depth;

static void init_devices(void)
{
    for (int i = 0; i < FAKE_MAX_DEVICES; i++) {
        g_dev[i].primary.magic = FAKE_CTX_MAGIC;
        g_dev[i].primary.device = i;
        g_dev[i].primary.primary = 1;
        g_dev[i].primary.id = fake_next_id();
    }
}

static struct fake_device *dev_get(int dev)
{
    pthread_once(&g_dev_once, init_devices);
    return &g_dev[dev];
}

int fake_dev_valid(CUdevice dev)
{
    return dev >= 0 && dev < fake_config()->ndev;
}

int fake_dev_charge(int dev, uint64_t bytes)
{
    struct fake_device *d = dev_get(dev);
    uint64_t total = fake_config()->mem_bytes;
    unsigned long long used = atomic_load(&d->used);
    do {
        if (bytes > total || used > total - bytes)
            return -ENOMEM;
    } while (!atomic_compare_exchange_weak(&d->used, &used, used + bytes));
    return 0;
}

void fake_dev_uncharge(int dev, uint64_t bytes)
{
    atomic_fetch_sub(&dev_get(dev)->used, bytes);
}

void fake_dev_meminfo(int dev, uint64_t *free_bytes, uint64_t *total_bytes)
{
    uint64_t total = fake_config()->mem_bytes;
    uint64_t used = atomic_load(&dev_get(dev)->used);
    *total_bytes = total;
    *free_bytes = used >= total ? 0 : total - used;
}

struct fake_ctx *fake_ctx_primary(int dev)
{
    return &dev_get(dev)->primary;
}

/* Is ctx a context object of ours (live or not)? Lock held. */
static int ctx_known_locked(const struct fake_ctx *ctx)
{
    if (!ctx)
        return 0;
    for (int i = 0; i < FAKE_MAX_DEVICES; i++)
        if (ctx == &dev_get(i)->primary)
            return 1;
    return fake_reg_has(&g_ctxs, ctx);
}

static int ctx_known(const struct fake_ctx *ctx)
{
    fake_lock();
    int known = ctx_known_locked(ctx);
    fake_unlock();
    return known;
}

/* Usable means: created and not destroyed, or primary and retained. */
static CUresult ctx_usable(const struct fake_ctx *ctx)
{
    if (atomic_load(&((struct fake_ctx *)ctx)->dead))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (ctx->primary && atomic_load(&dev_get(ctx->device)->prim_refs) == 0)
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    return CUDA_SUCCESS;
}

CUresult fake_ctx_current(struct fake_ctx **out)
{
    if (t_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct fake_ctx *ctx = t_stack[t_depth - 1];
    CUresult r = ctx_usable(ctx);
    if (r == CUDA_SUCCESS)
        *out = ctx;
    return r;
}

/* A context argument that may be NULL for "the current one". */
static CUresult ctx_arg(CUcontext arg, struct fake_ctx **out)
{
    if (!arg)
        return fake_ctx_current(out);
    struct fake_ctx *ctx = (struct fake_ctx *)arg;
    if (!ctx_known(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    CUresult r = ctx_usable(ctx);
    if (r == CUDA_SUCCESS)
        *out = ctx;
    return r;
}

/* ---- devices --------------------------------------------------------------- */

FAKE_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    FAKE_ENTER();
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fake_dev_valid(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuDeviceGet)

FAKE_EXPORT CUresult cuDeviceGetCount(int *count)
{
    FAKE_ENTER();
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = fake_config()->ndev;
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuDeviceGetCount)

FAKE_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    FAKE_ENTER();
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fake_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "Fake CUDA Device %d", dev);
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuDeviceGetName)

static CUresult device_uuid(CUuuid *uuid, CUdevice dev)
{
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fake_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    memset(uuid, 0, sizeof(*uuid));
    uuid->bytes[0] = 'F';
    uuid->bytes[1] = 'A';
    uuid->bytes[2] = 'K';
    uuid->bytes[3] = 'E';
    uuid->bytes[4] = (char)dev;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    FAKE_ENTER();
    return device_uuid(uuid, dev);
}
FAKE_LOCAL_ALIAS(cuDeviceGetUuid)

FAKE_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    FAKE_ENTER();
    return device_uuid(uuid, dev);
}
FAKE_LOCAL_ALIAS(cuDeviceGetUuid_v2)

FAKE_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    FAKE_ENTER();
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fake_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = fake_config()->mem_bytes;
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuDeviceTotalMem_v2)

FAKE_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    FAKE_ENTER();
    if (!pi || (int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fake_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = 4; break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *pi = 1; break;
    /* Beyond the minimum: each of these says "yes" to something this fake
     * really implements, so a caller probing for it is not turned away. */
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *pi = dev; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *pi = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    default: *pi = 0; break;
    }
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuDeviceGetAttribute)

FAKE_EXPORT CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    FAKE_ENTER();
    if (!pciBusId || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fake_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", (unsigned)dev);
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuDeviceGetPCIBusId)

FAKE_EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
    FAKE_ENTER();
    if (!dev || !pciBusId)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned domain = 0, bus, slot, func;
    /* Both "domain:bus:device.function" and "bus:device.function". */
    if (sscanf(pciBusId, "%x:%x:%x.%x", &domain, &bus, &slot, &func) != 4 &&
        sscanf(pciBusId, "%x:%x.%x", &bus, &slot, &func) != 3)
        return CUDA_ERROR_INVALID_VALUE;
    if (domain != 0 || slot != 0 || func != 0 || !fake_dev_valid((int)bus))
        return CUDA_ERROR_INVALID_DEVICE;
    *dev = (CUdevice)bus;
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuDeviceGetByPCIBusId)

/* ---- primary contexts ------------------------------------------------------ */

FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    FAKE_ENTER();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fake_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    struct fake_device *d = dev_get(dev);
    fake_lock();
    int made = atomic_fetch_add(&d->prim_refs, 1) == 0;
    fake_unlock();
    if (made) { /* a context on that GPU, as nvidia-smi would list it */
        char line[64];
        snprintf(line, sizeof line, "primary context made on device %d", (int)dev);
        fake_trace(line);
    }
    *pctx = (CUcontext)&d->primary;
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuDevicePrimaryCtxRetain)

static CUresult primary_release(CUdevice dev)
{
    if (!fake_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    struct fake_device *d = dev_get(dev);
    CUresult r = CUDA_SUCCESS;
    fake_lock();
    if (atomic_load(&d->prim_refs) == 0)
        r = CUDA_ERROR_INVALID_CONTEXT;
    else if (atomic_fetch_sub(&d->prim_refs, 1) == 1)
        fake_mem_ctx_gone_locked(&d->primary); /* the real driver resets it */
    fake_unlock();
    return r;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    FAKE_ENTER();
    return primary_release(dev);
}
FAKE_LOCAL_ALIAS(cuDevicePrimaryCtxRelease)

FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    FAKE_ENTER();
    return primary_release(dev);
}
FAKE_LOCAL_ALIAS(cuDevicePrimaryCtxRelease_v2)

FAKE_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    FAKE_ENTER();
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fake_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    struct fake_device *d = dev_get(dev);
    *flags = atomic_load(&d->prim_flags);
    *active = atomic_load(&d->prim_refs) > 0;
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuDevicePrimaryCtxGetState)

static CUresult primary_set_flags(CUdevice dev, unsigned int flags)
{
    if (!fake_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    atomic_store(&dev_get(dev)->prim_flags, flags);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    FAKE_ENTER();
    return primary_set_flags(dev, flags);
}
FAKE_LOCAL_ALIAS(cuDevicePrimaryCtxSetFlags)

FAKE_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    FAKE_ENTER();
    return primary_set_flags(dev, flags);
}
FAKE_LOCAL_ALIAS(cuDevicePrimaryCtxSetFlags_v2)

/* ---- created contexts and the stack --------------------------------------- */

static CUresult stack_push(struct fake_ctx *ctx)
{
    if (t_depth == CTX_STACK_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    t_stack[t_depth++] = ctx;
    return CUDA_SUCCESS;
}

/* Like cuCtxCreate: a new context, pushed on the calling thread's stack. */
static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fake_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (t_depth == CTX_STACK_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx->magic = FAKE_CTX_MAGIC;
    ctx->device = dev;
    ctx->flags = flags;
    ctx->id = fake_next_id();
    fake_lock();
    int err = fake_reg_add(&g_ctxs, ctx);
    fake_unlock();
    if (err) {
        free(ctx);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    stack_push(ctx);
    *pctx = (CUcontext)ctx;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    FAKE_ENTER();
    return ctx_create(pctx, flags, dev);
}
FAKE_LOCAL_ALIAS(cuCtxCreate)

FAKE_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    FAKE_ENTER();
    return ctx_create(pctx, flags, dev);
}
FAKE_LOCAL_ALIAS(cuCtxCreate_v2)

/* Affinity and CIG parameters are accepted and ignored. */
FAKE_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                    unsigned int flags, CUdevice dev)
{
    FAKE_ENTER();
    if (numParams < 0 || (numParams > 0 && !paramsArray))
        return CUDA_ERROR_INVALID_VALUE;
    return ctx_create(pctx, flags, dev);
}
FAKE_LOCAL_ALIAS(cuCtxCreate_v3)

FAKE_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                    unsigned int flags, CUdevice dev)
{
    FAKE_ENTER();
    (void)ctxCreateParams;
    return ctx_create(pctx, flags, dev);
}
FAKE_LOCAL_ALIAS(cuCtxCreate_v4)

static CUresult ctx_destroy(CUcontext arg)
{
    struct fake_ctx *ctx = (struct fake_ctx *)arg;
    fake_lock();
    if (!ctx || !ctx_known_locked(ctx) || ctx->primary || atomic_load(&ctx->dead)) {
        fake_unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    atomic_store(&ctx->dead, 1);
    fake_mem_ctx_gone_locked(ctx);
    fake_unlock();
    /* The real driver pops it when it is current to the calling thread;
     * other threads keep a stale entry that now reads as destroyed. */
    if (t_depth > 0 && t_stack[t_depth - 1] == ctx)
        t_depth--;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxDestroy(CUcontext ctx)
{
    FAKE_ENTER();
    return ctx_destroy(ctx);
}
FAKE_LOCAL_ALIAS(cuCtxDestroy)

FAKE_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    FAKE_ENTER();
    return ctx_destroy(ctx);
}
FAKE_LOCAL_ALIAS(cuCtxDestroy_v2)

FAKE_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    FAKE_ENTER();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = t_depth ? (CUcontext)t_stack[t_depth - 1] : NULL;
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuCtxGetCurrent)

/* Replaces the top of the stack; NULL pops (a no-op on an empty stack). */
FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext arg)
{
    FAKE_ENTER();
    struct fake_ctx *ctx = (struct fake_ctx *)arg;
    if (!ctx) {
        if (t_depth > 0)
            t_depth--;
        return CUDA_SUCCESS;
    }
    if (!ctx_known(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (atomic_load(&ctx->dead))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (t_depth == 0)
        return stack_push(ctx);
    t_stack[t_depth - 1] = ctx;
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuCtxSetCurrent)

static CUresult ctx_push(CUcontext arg)
{
    struct fake_ctx *ctx = (struct fake_ctx *)arg;
    if (!ctx || !ctx_known(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (atomic_load(&ctx->dead))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    return stack_push(ctx);
}

FAKE_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx)
{
    FAKE_ENTER();
    return ctx_push(ctx);
}
FAKE_LOCAL_ALIAS(cuCtxPushCurrent)

FAKE_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    FAKE_ENTER();
    return ctx_push(ctx);
}
FAKE_LOCAL_ALIAS(cuCtxPushCurrent_v2)

static CUresult ctx_pop(CUcontext *pctx)
{
    if (t_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct fake_ctx *ctx = t_stack[--t_depth];
    if (pctx)
        *pctx = (CUcontext)ctx;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxPopCurrent(CUcontext *pctx)
{
    FAKE_ENTER();
    return ctx_pop(pctx);
}
FAKE_LOCAL_ALIAS(cuCtxPopCurrent)

FAKE_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    FAKE_ENTER();
    return ctx_pop(pctx);
}
FAKE_LOCAL_ALIAS(cuCtxPopCurrent_v2)

FAKE_EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
    FAKE_ENTER();
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_ctx *ctx;
    CUresult r = fake_ctx_current(&ctx);
    if (r == CUDA_SUCCESS)
        *device = ctx->device;
    return r;
}
FAKE_LOCAL_ALIAS(cuCtxGetDevice)

FAKE_EXPORT CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext arg)
{
    FAKE_ENTER();
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_ctx *ctx;
    CUresult r = ctx_arg(arg, &ctx);
    if (r == CUDA_SUCCESS)
        *device = ctx->device;
    return r;
}
FAKE_LOCAL_ALIAS(cuCtxGetDevice_v2)

FAKE_EXPORT CUresult cuCtxSynchronize(void)
{
    FAKE_ENTER();
    struct fake_ctx *ctx;
    CUresult r = fake_ctx_current(&ctx);
    if (r == CUDA_SUCCESS)
        fake_sync_delay();
    return r;
}
FAKE_LOCAL_ALIAS(cuCtxSynchronize)

FAKE_EXPORT CUresult cuCtxSynchronize_v2(CUcontext arg)
{
    FAKE_ENTER();
    struct fake_ctx *ctx;
    CUresult r = ctx_arg(arg, &ctx);
    if (r == CUDA_SUCCESS)
        fake_sync_delay();
    return r;
}
FAKE_LOCAL_ALIAS(cuCtxSynchronize_v2)

FAKE_EXPORT CUresult cuCtxGetApiVersion(CUcontext arg, unsigned int *version)
{
    FAKE_ENTER();
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_ctx *ctx;
    CUresult r = ctx_arg(arg, &ctx);
    if (r == CUDA_SUCCESS)
        *version = FAKE_CTX_API_VERSION;
    return r;
}
FAKE_LOCAL_ALIAS(cuCtxGetApiVersion)

static size_t stack_limit(const struct fake_ctx *ctx)
{
    return ctx->stack_limit ? ctx->stack_limit : FAKE_DEFAULT_STACK;
}

uint64_t fake_ctx_stack_bytes(void)
{
    uint64_t bytes = 0;
    fake_lock();
    for (int d = 0; d < fake_config()->ndev; d++)
        if (atomic_load(&dev_get(d)->prim_refs) > 0)
            bytes += stack_limit(&dev_get(d)->primary) * FAKE_STACK_THREADS;
    for (size_t i = 0; i < g_ctxs.n; i++) {
        const struct fake_ctx *c = g_ctxs.v[i].data;
        if (!atomic_load(&c->dead))
            bytes += stack_limit(c) * FAKE_STACK_THREADS;
    }
    fake_unlock();
    return bytes;
}

/* The stack limit is kept per context; the printf FIFO and the device
 * heap answer the real defaults and take any size. */
FAKE_EXPORT CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
    FAKE_ENTER();
    if (!pvalue)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_ctx *ctx;
    CUresult r = fake_ctx_current(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    switch (limit) {
    case CU_LIMIT_STACK_SIZE:
        *pvalue = stack_limit(ctx);
        return CUDA_SUCCESS;
    case CU_LIMIT_PRINTF_FIFO_SIZE:
        *pvalue = 1u << 20;
        return CUDA_SUCCESS;
    case CU_LIMIT_MALLOC_HEAP_SIZE:
        *pvalue = 8u << 20;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    }
}
FAKE_LOCAL_ALIAS(cuCtxGetLimit)

FAKE_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    FAKE_ENTER();
    struct fake_ctx *ctx;
    CUresult r = fake_ctx_current(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    switch (limit) {
    case CU_LIMIT_STACK_SIZE:
        fake_lock();
        ctx->stack_limit = value ? (value + 15) / 16 * 16 : 16;
        fake_unlock();
        return CUDA_SUCCESS;
    case CU_LIMIT_PRINTF_FIFO_SIZE:
    case CU_LIMIT_MALLOC_HEAP_SIZE:
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    }
}
FAKE_LOCAL_ALIAS(cuCtxSetLimit)

FAKE_EXPORT CUresult cuCtxGetFlags(unsigned int *flags)
{
    FAKE_ENTER();
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_ctx *ctx;
    CUresult r = fake_ctx_current(&ctx);
    if (r == CUDA_SUCCESS)
        *flags = ctx->primary ? atomic_load(&dev_get(ctx->device)->prim_flags) : ctx->flags;
    return r;
}
FAKE_LOCAL_ALIAS(cuCtxGetFlags)

FAKE_EXPORT CUresult cuCtxGetId(CUcontext arg, unsigned long long *ctxId)
{
    FAKE_ENTER();
    if (!ctxId)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_ctx *ctx;
    CUresult r = ctx_arg(arg, &ctx);
    if (r == CUDA_SUCCESS)
        *ctxId = ctx->id;
    return r;
}
FAKE_LOCAL_ALIAS(cuCtxGetId)
