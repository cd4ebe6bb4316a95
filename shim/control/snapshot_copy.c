/* A GPU-held snapshot's copies: see snapshot_copy.h. */
#define _GNU_SOURCE
#include "snapshot_copy.h"

#include <errno.h>
#include <stdlib.h>

#include "../interpose/contexts.h"
#include "../interpose/driver_error.h"
#include "../interpose/real_driver.h"
#include "../pool/pool.h"

static int cu_errno(CUresult r, CUresult *cu_err)
{
    *cu_err = r;
    return r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Every chunk of the runs holds live allocations on device now. */
static int runs_in_use(int device, const struct gpck_chunk_run *runs, uint32_t n)
{
    uint64_t cs = gp_pool_config()->chunk_size;
    size_t count = gp_pool_chunks_in_use(device, NULL, 0);
    uint64_t *now = malloc((count ? count : 1) * sizeof(*now));
    if (!now)
        return -ENOMEM;
    size_t listed = gp_pool_chunks_in_use(device, now, count); /* address order */
    count = listed < count ? listed : count;
    int err = 0;
    for (uint32_t i = 0; !err && i < n; i++)
        for (uint64_t k = 0; !err && k < runs[i].chunks; k++) {
            uint64_t addr = runs[i].addr + k * cs;
            if (!bsearch(&addr, now, count, sizeof(*now), cmp_u64))
                err = -ESTALE;
        }
    free(now);
    return err;
}

int gp_snapshot_copy(int device, const struct gpck_chunk_run *runs, const int *fds, uint32_t n, bool out,
                      uint64_t *bytes, bool *touched, CUresult *cu_err)
{
    const struct gp_pool_config *cfg = gp_pool_config();
    *bytes = 0;
    *touched = false;
    if (!cfg || device < 0 || device >= cfg->device_count || !n)
        return -EINVAL;
    uint64_t cs = cfg->chunk_size, total = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!runs[i].chunks || runs[i].chunks > cfg->slice_size / cs)
            return -EINVAL;
        total += runs[i].chunks * cs;
    }
    int err = runs_in_use(device, runs, n);
    if (!err)
        err = gp_contexts_use_primary(device, cu_err);
    CUmemGenericAllocationHandle *handles = err ? NULL : calloc(n, sizeof(*handles));
    if (!err && !handles)
        err = -ENOMEM;
    if (err)
        return err;
    /* Side by side in one scratch range, so that one access grant serves them all. */
    CUdeviceptr scratch = 0;
    CUstream stream = NULL;
    CUresult r = GP_CALL(cuMemAddressReserve, &scratch, total, cs, 0, 0);
    if (r != CUDA_SUCCESS)
        scratch = 0;
    uint64_t off = 0;
    for (uint32_t i = 0; r == CUDA_SUCCESS && i < n; off += runs[i].chunks * cs, i++) {
        r = GP_CALL(cuMemImportFromShareableHandle, &handles[i], (void *)(intptr_t)fds[i],
                                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (r == CUDA_SUCCESS && (r = GP_CALL(cuMemMap, scratch + off, runs[i].chunks * cs, 0, handles[i], 0)) != CUDA_SUCCESS) {
            GP_REAL(cuMemRelease)(handles[i]);
            handles[i] = 0;
        }
    }
    CUmemAccessDesc access = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, device },
                               .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    if (r == CUDA_SUCCESS)
        r = GP_CALL(cuMemSetAccess, scratch, total, &access, 1);
    if (r == CUDA_SUCCESS && (r = GP_CALL(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS)
        stream = NULL;
    off = 0;
    *touched = r == CUDA_SUCCESS;
    for (uint32_t i = 0; r == CUDA_SUCCESS && i < n; off += runs[i].chunks * cs, i++)
        r = GP_CALL(cuMemcpyDtoDAsync_v2, out ? scratch + off : runs[i].addr, out ? runs[i].addr : scratch + off,
                    runs[i].chunks * cs, stream);
    if (stream) {
        CUresult s = GP_CALL(cuStreamSynchronize, stream);
        r = r == CUDA_SUCCESS ? s : r;
        GP_REAL(cuStreamDestroy_v2)(stream);
    }
    off = 0;
    for (uint32_t i = 0; i < n; off += runs[i].chunks * cs, i++)
        if (handles[i]) {
            GP_REAL(cuMemUnmap)(scratch + off, runs[i].chunks * cs);
            GP_REAL(cuMemRelease)(handles[i]);
        }
    if (scratch)
        GP_REAL(cuMemAddressFree)(scratch, total);
    free(handles);
    if (r != CUDA_SUCCESS)
        return cu_errno(r, cu_err);
    *bytes = total;
    return 0;
}

