#define _GNU_SOURCE
#include "../interpose/test_hooks.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../interpose/cuda_api.h" /* before pool.h: see cuda_api.h */
#include "../interpose/log.h"
#include "../interpose/real_driver.h"
#include "../pool/pool.h"

/* The entry points the shim calls while serving the controller: the
 * quiesce (context and stream synchronise), the copies out and in (and
 * their batches, below), the pool's release and remapping, the contexts'
 * stack limits lowered and set again, and a migrate's peer hold (imports). */
#define GP_FAULTABLE(X)                                                                                              \
    X(cuCtxSynchronize, (void), ())                                                                                  \
    X(cuCtxSetLimit, (CUlimit limit, size_t value), (limit, value))                                                  \
    X(cuStreamSynchronize, (CUstream s), (s))                                                                        \
    X(cuMemcpyDtoHAsync_v2, (void *dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))                    \
    X(cuMemcpyHtoDAsync_v2, (CUdeviceptr dst, const void *src, size_t n, CUstream s), (dst, src, n, s))              \
    X(cuMemCreate, (CUmemGenericAllocationHandle * h, size_t n, const CUmemAllocationProp *p, unsigned long long f), \
      (h, n, p, f))                                                                                                  \
    X(cuMemMap, (CUdeviceptr ptr, size_t n, size_t off, CUmemGenericAllocationHandle h, unsigned long long f),       \
      (ptr, n, off, h, f))                                                                                           \
    X(cuMemSetAccess, (CUdeviceptr ptr, size_t n, const CUmemAccessDesc *d, size_t count), (ptr, n, d, count))       \
    X(cuMemUnmap, (CUdeviceptr ptr, size_t n), (ptr, n))                                                             \
    X(cuMemRelease, (CUmemGenericAllocationHandle h), (h))                                                          \
    X(cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle * h, void *fd, CUmemAllocationHandleType t),     \
      (h, fd, t))

static void *real_of[GP_IDX_COUNT];
/* Per entry point: the call that fails (0: none) and the calls so far. */
static atomic_ulong fail_at[GP_IDX_COUNT];
static atomic_ulong counted[GP_IDX_COUNT];
static _Thread_local bool counting;

/* True exactly once: at the armed call of idx on the counted thread. */
static bool due(int idx, const char *name)
{
    if (!counting || !atomic_load_explicit(&fail_at[idx], memory_order_relaxed))
        return false;
    unsigned long nth = atomic_fetch_add(&counted[idx], 1) + 1;
    if (nth != atomic_load(&fail_at[idx]))
        return false;
    GP_WARN("test", "GPUCKPT_TEST_DRIVER_FAULT: failing call %lu of %s", nth, name);
    return true;
}

#define GP_STAND_IN(name, params, args)                                                                    \
    static CUresult fault_##name params                                                                    \
    {                                                                                                      \
        return due(GP_IDX_##name, #name) ? CUDA_ERROR_UNKNOWN : ((gp_pfn_##name)real_of[GP_IDX_##name]) args; \
    }
GP_FAULTABLE(GP_STAND_IN)

/* The bounce ring's batches (one per slot, where the driver has them)
 * count as DMAs of their direction as well as batches: "the nth DMA into
 * the pool" means the same whether the driver batches or not. */
static CUresult fault_cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                            CUmemcpyAttributes *attrs, size_t *attrs_idxs, size_t num_attrs,
                                            CUstream s)
{
    bool into_pool = count && gp_pool_contains(dsts[0]);
    int dma = into_pool ? GP_IDX_cuMemcpyHtoDAsync_v2 : GP_IDX_cuMemcpyDtoHAsync_v2;
    bool fail = due(GP_IDX_cuMemcpyBatchAsync_v2, "cuMemcpyBatchAsync_v2");
    fail |= due(dma, into_pool ? "cuMemcpyHtoDAsync_v2 (a batch)" : "cuMemcpyDtoHAsync_v2 (a batch)");
    return fail ? CUDA_ERROR_UNKNOWN
                : ((gp_pfn_cuMemcpyBatchAsync_v2)real_of[GP_IDX_cuMemcpyBatchAsync_v2])(
                      dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, s);
}

static const struct stand_in {
    const char *name;
    int idx;
    void *fn;
} stand_ins[] = {
#define GP_STAND_IN_ROW(name, params, args) { #name, GP_IDX_##name, (void *)(gp_pfn_##name)fault_##name },
    GP_FAULTABLE(GP_STAND_IN_ROW)
    GP_STAND_IN_ROW(cuMemcpyBatchAsync_v2, , )
};

static const struct stand_in *stand_in_of(int idx)
{
    for (size_t i = 0; i < sizeof(stand_ins) / sizeof(stand_ins[0]); i++)
        if (stand_ins[i].idx == idx)
            return &stand_ins[i];
    return NULL;
}

/* Puts the stand-in of row s in place of the real entry point (once). */
static void stand_in_for(const struct stand_in *s)
{
    if (gp_real[s->idx] && !real_of[s->idx]) {
        real_of[s->idx] = gp_real[s->idx];
        gp_real[s->idx] = s->fn;
    }
}

/* 0, -EINVAL (not fn:n), -ENOENT (not an entry point the shim calls for
 * the controller). */
static int arm(const char *entry)
{
    const char *colon = strchr(entry, ':');
    char *end;
    unsigned long nth = colon ? strtoul(colon + 1, &end, 10) : 0;
    if (!colon || nth == 0 || *end)
        return -EINVAL;
    for (size_t i = 0; i < sizeof(stand_ins) / sizeof(stand_ins[0]); i++) {
        const struct stand_in *s = &stand_ins[i];
        if (strlen(s->name) != (size_t)(colon - entry) || strncmp(s->name, entry, (size_t)(colon - entry)) != 0)
            continue;
        if (!gp_real[s->idx])
            return -ENOENT;
        stand_in_for(s);
        /* A DMA's count goes on in the batches too. */
        if (s->idx == GP_IDX_cuMemcpyHtoDAsync_v2 || s->idx == GP_IDX_cuMemcpyDtoHAsync_v2)
            stand_in_for(stand_in_of(GP_IDX_cuMemcpyBatchAsync_v2));
        atomic_store(&fail_at[s->idx], nth);
        return 0;
    }
    return -ENOENT;
}

void gp_test_faults_install(void)
{
    const char *spec = getenv("GPUCKPT_TEST_DRIVER_FAULT");
    if (!spec || !*spec)
        return;
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", spec);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int err = arm(tok);
        /* The controller's own entry points (cuCheckpointProcess*) are
         * its business: the same variable may reach both processes. */
        if (err == -EINVAL || (err == -ENOENT && strncmp(tok, "cuCheckpointProcess", 19) != 0))
            GP_ERROR("test", "GPUCKPT_TEST_DRIVER_FAULT: '%s' is not fn:n with fn one the shim calls for the controller",
                     tok);
    }
}

void gp_test_faults_count_this_thread(void)
{
    counting = true;
}
