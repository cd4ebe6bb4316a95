#define _GNU_SOURCE
#include "contexts.h"

#include <errno.h>
#include <pthread.h>

#include "driver_error.h"
#include "real_driver.h"
#include "routed.h"

#define MAX_TRACKED 256

static CUcontext tracked[MAX_TRACKED];
static int tracked_count;
static CUcontext primaries[16]; /* one per device, GP_POOL_MAX_DEVICES */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

void gp_contexts_add(CUcontext ctx)
{
    pthread_mutex_lock(&lock);
    if (tracked_count < MAX_TRACKED)
        tracked[tracked_count++] = ctx;
    pthread_mutex_unlock(&lock);
}

void gp_contexts_remove(CUcontext ctx)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < tracked_count; i++)
        if (tracked[i] == ctx) {
            tracked[i] = tracked[--tracked_count];
            break;
        }
    pthread_mutex_unlock(&lock);
}

static int sync_ctx(CUcontext ctx, CUresult *cu_err)
{
    CUresult r = GP_CALL(cuCtxPushCurrent_v2, ctx);
    if (r == CUDA_SUCCESS) {
        r = GP_CALL(cuCtxSynchronize);
        CUcontext popped;
        GP_REAL(cuCtxPopCurrent_v2)(&popped);
    }
    if (r != CUDA_SUCCESS) {
        *cu_err = r;
        return -EIO;
    }
    return 0;
}

/* fn on every active primary context and every context the application
 * made, until one fails; 0 or its error. */
static int each_context(int device_count, int (*fn)(CUcontext, CUresult *), CUresult *cu_err)
{
    for (int d = 0; d < device_count; d++) {
        unsigned int flags;
        int active = 0;
        if (GP_REAL(cuDevicePrimaryCtxGetState)(d, &flags, &active) != CUDA_SUCCESS || !active)
            continue;
        CUcontext ctx;
        CUresult r = GP_CALL(cuDevicePrimaryCtxRetain, &ctx, d);
        if (r != CUDA_SUCCESS) {
            *cu_err = r;
            return -EIO;
        }
        int err = fn(ctx, cu_err);
        GP_REAL(cuDevicePrimaryCtxRelease_v2)(d);
        if (err)
            return err;
    }
    pthread_mutex_lock(&lock);
    int err = 0;
    for (int i = 0; i < tracked_count && !err; i++)
        err = fn(tracked[i], cu_err);
    pthread_mutex_unlock(&lock);
    return err;
}

int gp_contexts_sync_all(int device_count, CUresult *cu_err)
{
    return each_context(device_count, sync_ctx, cu_err);
}

/* The driver's floor; the local memory per thread follows the limit. */
#define LEAST_STACK 16

struct kept_stack {
    CUcontext ctx;
    size_t limit;
};
/* Control thread only: shrink and restore run there, one at a time. */
static struct kept_stack kept_stacks[16 + MAX_TRACKED];
static int kept_stack_count;

static int shrink_stack(CUcontext ctx, CUresult *cu_err)
{
    for (int i = 0; i < kept_stack_count; i++)
        if (kept_stacks[i].ctx == ctx)
            return 0; /* shrunk already, its own limit kept */
    if (kept_stack_count == (int)(sizeof(kept_stacks) / sizeof(kept_stacks[0])))
        return 0;
    /* Not GP_CALL: a failure here costs bytes, and must not become the
     * reason a request gives for another failure. */
    CUresult r = GP_REAL(cuCtxPushCurrent_v2)(ctx);
    if (r != CUDA_SUCCESS) {
        *cu_err = r;
        return -EIO;
    }
    size_t limit = 0;
    r = GP_REAL(cuCtxGetLimit)(&limit, CU_LIMIT_STACK_SIZE);
    if (r == CUDA_SUCCESS && limit > LEAST_STACK) {
        r = GP_REAL(cuCtxSetLimit)(CU_LIMIT_STACK_SIZE, LEAST_STACK);
        if (r == CUDA_SUCCESS)
            kept_stacks[kept_stack_count++] = (struct kept_stack){ ctx, limit };
    }
    CUcontext popped;
    GP_REAL(cuCtxPopCurrent_v2)(&popped);
    if (r != CUDA_SUCCESS) {
        *cu_err = r;
        return -EIO;
    }
    return 0;
}

int gp_contexts_shrink_stacks(int device_count, CUresult *cu_err)
{
    if (!GP_HAS_REAL(cuCtxGetLimit) || !GP_HAS_REAL(cuCtxSetLimit))
        return 0;
    return each_context(device_count, shrink_stack, cu_err);
}

int gp_contexts_restore_stacks(CUresult *cu_err)
{
    while (kept_stack_count > 0) {
        struct kept_stack *k = &kept_stacks[kept_stack_count - 1];
        CUresult r = GP_CALL(cuCtxPushCurrent_v2, k->ctx);
        if (r == CUDA_SUCCESS) {
            r = GP_CALL(cuCtxSetLimit, CU_LIMIT_STACK_SIZE, k->limit);
            CUcontext popped;
            GP_REAL(cuCtxPopCurrent_v2)(&popped);
        }
        if (r != CUDA_SUCCESS)
            return gp_cu_errno(r, cu_err);
        kept_stack_count--;
    }
    return 0;
}

int gp_contexts_use_primary(int device, CUresult *cu_err)
{
    if (device < 0 || device >= (int)(sizeof(primaries) / sizeof(primaries[0])))
        return -EINVAL;
    if (!primaries[device]) {
        CUresult r = GP_CALL(cuDevicePrimaryCtxRetain, &primaries[device], device);
        if (r != CUDA_SUCCESS) {
            primaries[device] = NULL;
            *cu_err = r;
            return -EIO;
        }
    }
    CUresult r = GP_CALL(cuCtxSetCurrent, primaries[device]);
    if (r != CUDA_SUCCESS) {
        *cu_err = r;
        return -EIO;
    }
    return 0;
}

CUresult gp_routed_cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CUresult r = GP_REAL(cuCtxCreate_v2)(pctx, flags, dev);
    if (r == CUDA_SUCCESS)
        gp_contexts_add(*pctx);
    return r;
}

CUresult gp_routed_cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags,
                                  CUdevice dev)
{
    CUresult r = GP_REAL(cuCtxCreate_v3)(pctx, paramsArray, numParams, flags, dev);
    if (r == CUDA_SUCCESS)
        gp_contexts_add(*pctx);
    return r;
}

CUresult gp_routed_cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags, CUdevice dev)
{
    CUresult r = GP_REAL(cuCtxCreate_v4)(pctx, ctxCreateParams, flags, dev);
    if (r == CUDA_SUCCESS)
        gp_contexts_add(*pctx);
    return r;
}

CUresult gp_routed_cuCtxDestroy_v2(CUcontext ctx)
{
    CUresult r = GP_REAL(cuCtxDestroy_v2)(ctx);
    if (r == CUDA_SUCCESS)
        gp_contexts_remove(ctx);
    return r;
}
