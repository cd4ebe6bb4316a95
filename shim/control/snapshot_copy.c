/* A GPU-held snapshot's copies: see snapshot_copy.h. */
#define _GNU_SOURCE
#include "snapshot_copy.h"

#include <errno.h>
#include <stdlib.h>

#include "../interpose/contexts.h"
#include "../interpose/driver_error.h"
#include "../interpose/real_driver.h"
#include "../pool/pool.h"

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
        if (!gp_pool_chunks_used(device, runs[i].addr, runs[i].chunks))
            return -ESTALE; /* not the chunks the snapshot copies */
        total += runs[i].chunks * cs;
    }
    int err = gp_contexts_use_primary(device, cu_err);
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
        return gp_cu_errno(r, cu_err);
    *bytes = total;
    return 0;
}

