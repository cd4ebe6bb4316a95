/* cuGetProcAddress: resolves a base name ("cuMemAlloc") and a CUDA version
 * to one of our exported functions, from a static table.
 *
 * Never dlsym: the shim under test interposes dlsym, and the point of this
 * entry point is to let the shim (and cudart-style callers) reach the
 * driver without it.
 *
 * The table mirrors the real driver's versioning: each row is a base name,
 * the CUDA version that introduced that variant, whether it is the
 * per-thread-default-stream variant, and the exported function. Every row
 * is checked at compile time against cudaTypedefs.h: the typedef
 * PFN_<name>_v<version>[_ptds|_ptsz] must exist and have exactly the
 * function's type, so a wrong version number or signature does not build.
 *
 * Rules, as in the real driver:
 *  - among the rows for the name whose version is <= cudaVersion, take the
 *    highest ("cuCtxCreate" at 12050 and later is cuCtxCreate_v4, and
 *    "cuCtxSynchronize" at 13000 is cuCtxSynchronize_v2, which takes a
 *    context argument);
 *  - with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, a _ptds/_ptsz row
 *    that qualifies wins over the default one;
 *  - unknown name: CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND; no row old enough:
 *    CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT; both CUDA_ERROR_NOT_FOUND
 *    with *pfn = NULL.
 * The pointers handed out are this library's own functions even when an
 * LD_PRELOAD shim defines the same names (see FAKE_LOCAL_ALIAS).
 */
#include "fake_internal.h"

#include <cudaTypedefs.h>
#include <string.h>

/* X(base name, version, per-thread suffix or nothing, exported function) */
#define FAKE_PROCS(X)                                                          \
    X(cuInit, 2000, , cuInit)                                                  \
    X(cuDriverGetVersion, 2020, , cuDriverGetVersion)                          \
    X(cuGetErrorString, 6000, , cuGetErrorString)                              \
    X(cuGetErrorName, 6000, , cuGetErrorName)                                  \
    X(cuGetProcAddress, 11030, , cuGetProcAddress)                             \
    X(cuGetProcAddress, 12000, , cuGetProcAddress_v2)                          \
    /* devices */                                                              \
    X(cuDeviceGet, 2000, , cuDeviceGet)                                        \
    X(cuDeviceGetCount, 2000, , cuDeviceGetCount)                              \
    X(cuDeviceGetName, 2000, , cuDeviceGetName)                                \
    X(cuDeviceGetUuid, 9020, , cuDeviceGetUuid)                                \
    X(cuDeviceGetUuid, 11040, , cuDeviceGetUuid_v2)                            \
    X(cuDeviceTotalMem, 3020, , cuDeviceTotalMem_v2)                           \
    X(cuDeviceGetAttribute, 2000, , cuDeviceGetAttribute)                      \
    X(cuDeviceGetPCIBusId, 4010, , cuDeviceGetPCIBusId)                        \
    X(cuDeviceGetByPCIBusId, 4010, , cuDeviceGetByPCIBusId)                    \
    X(cuDevicePrimaryCtxRetain, 7000, , cuDevicePrimaryCtxRetain)              \
    X(cuDevicePrimaryCtxRelease, 7000, , cuDevicePrimaryCtxRelease)            \
    X(cuDevicePrimaryCtxRelease, 11000, , cuDevicePrimaryCtxRelease_v2)        \
    X(cuDevicePrimaryCtxGetState, 7000, , cuDevicePrimaryCtxGetState)          \
    X(cuDevicePrimaryCtxSetFlags, 7000, , cuDevicePrimaryCtxSetFlags)          \
    X(cuDevicePrimaryCtxSetFlags, 11000, , cuDevicePrimaryCtxSetFlags_v2)      \
    /* contexts */                                                             \
    X(cuCtxCreate, 2000, , cuCtxCreate)                                        \
    X(cuCtxCreate, 3020, , cuCtxCreate_v2)                                     \
    X(cuCtxCreate, 11040, , cuCtxCreate_v3)                                    \
    X(cuCtxCreate, 12050, , cuCtxCreate_v4)                                    \
    X(cuCtxDestroy, 2000, , cuCtxDestroy)                                      \
    X(cuCtxDestroy, 4000, , cuCtxDestroy_v2)                                   \
    X(cuCtxGetCurrent, 4000, , cuCtxGetCurrent)                                \
    X(cuCtxSetCurrent, 4000, , cuCtxSetCurrent)                                \
    X(cuCtxPushCurrent, 2000, , cuCtxPushCurrent)                              \
    X(cuCtxPushCurrent, 4000, , cuCtxPushCurrent_v2)                           \
    X(cuCtxPopCurrent, 2000, , cuCtxPopCurrent)                                \
    X(cuCtxPopCurrent, 4000, , cuCtxPopCurrent_v2)                             \
    X(cuCtxGetDevice, 2000, , cuCtxGetDevice)                                  \
    X(cuCtxGetDevice, 13000, , cuCtxGetDevice_v2)                              \
    X(cuCtxSynchronize, 2000, , cuCtxSynchronize)                              \
    X(cuCtxSynchronize, 13000, , cuCtxSynchronize_v2)                          \
    X(cuCtxGetApiVersion, 3020, , cuCtxGetApiVersion)                          \
    X(cuCtxGetFlags, 7000, , cuCtxGetFlags)                                    \
    X(cuCtxGetLimit, 3010, , cuCtxGetLimit)                                    \
    X(cuCtxSetLimit, 3010, , cuCtxSetLimit)                                    \
    X(cuCtxGetId, 12000, , cuCtxGetId)                                         \
    /* classic memory */                                                       \
    X(cuMemGetInfo, 3020, , cuMemGetInfo_v2)                                   \
    X(cuMemAlloc, 3020, , cuMemAlloc_v2)                                       \
    X(cuMemAllocPitch, 3020, , cuMemAllocPitch_v2)                             \
    X(cuMemFree, 3020, , cuMemFree_v2)                                         \
    X(cuMemGetAddressRange, 3020, , cuMemGetAddressRange_v2)                   \
    X(cuMemAllocHost, 3020, , cuMemAllocHost_v2)                               \
    X(cuMemFreeHost, 2000, , cuMemFreeHost)                                    \
    X(cuMemHostAlloc, 2020, , cuMemHostAlloc)                                  \
    X(cuMemHostGetDevicePointer, 3020, , cuMemHostGetDevicePointer_v2)         \
    X(cuMemAllocManaged, 6000, , cuMemAllocManaged)                            \
    X(cuMemAllocAsync, 11020, , cuMemAllocAsync)                               \
    X(cuMemAllocAsync, 11020, _ptsz, cuMemAllocAsync_ptsz)                     \
    X(cuMemFreeAsync, 11020, , cuMemFreeAsync)                                 \
    X(cuMemFreeAsync, 11020, _ptsz, cuMemFreeAsync_ptsz)                       \
    X(cuMemHostRegister, 4000, , cuMemHostRegister)                            \
    X(cuMemHostRegister, 6050, , cuMemHostRegister_v2)                         \
    X(cuMemHostUnregister, 4000, , cuMemHostUnregister)                        \
    X(cuPointerGetAttribute, 4000, , cuPointerGetAttribute)                    \
    X(cuPointerGetAttributes, 7000, , cuPointerGetAttributes)                  \
    /* virtual memory management */                                            \
    X(cuMemGetAllocationGranularity, 10020, , cuMemGetAllocationGranularity)   \
    X(cuMemAddressReserve, 10020, , cuMemAddressReserve)                       \
    X(cuMemAddressFree, 10020, , cuMemAddressFree)                             \
    X(cuMemCreate, 10020, , cuMemCreate)                                       \
    X(cuMemRelease, 10020, , cuMemRelease)                                     \
    X(cuMemMap, 10020, , cuMemMap)                                             \
    X(cuMemUnmap, 10020, , cuMemUnmap)                                         \
    X(cuMemSetAccess, 10020, , cuMemSetAccess)                                 \
    X(cuMemGetAccess, 10020, , cuMemGetAccess)                                 \
    X(cuMemGetAllocationPropertiesFromHandle, 10020, ,                         \
      cuMemGetAllocationPropertiesFromHandle)                                  \
    X(cuMemRetainAllocationHandle, 11000, , cuMemRetainAllocationHandle)       \
    X(cuMemExportToShareableHandle, 10020, , cuMemExportToShareableHandle)     \
    X(cuMemImportFromShareableHandle, 10020, , cuMemImportFromShareableHandle) \
    /* copies and sets */                                                      \
    X(cuMemcpyHtoD, 3020, , cuMemcpyHtoD_v2)                                   \
    X(cuMemcpyHtoD, 7000, _ptds, cuMemcpyHtoD_v2_ptds)                         \
    X(cuMemcpyDtoH, 3020, , cuMemcpyDtoH_v2)                                   \
    X(cuMemcpyDtoH, 7000, _ptds, cuMemcpyDtoH_v2_ptds)                         \
    X(cuMemcpyDtoD, 3020, , cuMemcpyDtoD_v2)                                   \
    X(cuMemcpyDtoD, 7000, _ptds, cuMemcpyDtoD_v2_ptds)                         \
    X(cuMemcpy, 4000, , cuMemcpy)                                              \
    X(cuMemcpy, 7000, _ptds, cuMemcpy_ptds)                                    \
    X(cuMemcpyHtoDAsync, 3020, , cuMemcpyHtoDAsync_v2)                         \
    X(cuMemcpyHtoDAsync, 7000, _ptsz, cuMemcpyHtoDAsync_v2_ptsz)               \
    X(cuMemcpyDtoHAsync, 3020, , cuMemcpyDtoHAsync_v2)                         \
    X(cuMemcpyDtoHAsync, 7000, _ptsz, cuMemcpyDtoHAsync_v2_ptsz)               \
    X(cuMemcpyDtoDAsync, 3020, , cuMemcpyDtoDAsync_v2)                         \
    X(cuMemcpyDtoDAsync, 7000, _ptsz, cuMemcpyDtoDAsync_v2_ptsz)               \
    X(cuMemcpyAsync, 4000, , cuMemcpyAsync)                                    \
    X(cuMemcpyBatchAsync, 13000, , cuMemcpyBatchAsync_v2)                     \
    X(cuMemcpyAsync, 7000, _ptsz, cuMemcpyAsync_ptsz)                          \
    X(cuMemsetD8, 3020, , cuMemsetD8_v2)                                       \
    X(cuMemsetD8, 7000, _ptds, cuMemsetD8_v2_ptds)                             \
    X(cuMemsetD32, 3020, , cuMemsetD32_v2)                                     \
    X(cuMemsetD32, 7000, _ptds, cuMemsetD32_v2_ptds)                           \
    X(cuMemsetD8Async, 3020, , cuMemsetD8Async)                                \
    X(cuMemsetD8Async, 7000, _ptsz, cuMemsetD8Async_ptsz)                      \
    X(cuMemsetD32Async, 3020, , cuMemsetD32Async)                              \
    X(cuMemsetD32Async, 7000, _ptsz, cuMemsetD32Async_ptsz)                    \
    /* streams, events, launches */                                            \
    X(cuStreamCreate, 2000, , cuStreamCreate)                                  \
    X(cuStreamCreateWithPriority, 5050, , cuStreamCreateWithPriority)          \
    X(cuStreamDestroy, 2000, , cuStreamDestroy)                                \
    X(cuStreamDestroy, 4000, , cuStreamDestroy_v2)                             \
    X(cuStreamSynchronize, 2000, , cuStreamSynchronize)                        \
    X(cuStreamSynchronize, 7000, _ptsz, cuStreamSynchronize_ptsz)              \
    X(cuStreamQuery, 2000, , cuStreamQuery)                                    \
    X(cuStreamQuery, 7000, _ptsz, cuStreamQuery_ptsz)                          \
    X(cuEventCreate, 2000, , cuEventCreate)                                    \
    X(cuEventRecord, 2000, , cuEventRecord)                                    \
    X(cuEventRecord, 7000, _ptsz, cuEventRecord_ptsz)                          \
    X(cuEventSynchronize, 2000, , cuEventSynchronize)                          \
    X(cuEventQuery, 2000, , cuEventQuery)                                      \
    X(cuEventDestroy, 2000, , cuEventDestroy)                                  \
    X(cuEventDestroy, 4000, , cuEventDestroy_v2)                               \
    X(cuEventElapsedTime, 2000, , cuEventElapsedTime)                          \
    X(cuEventElapsedTime, 12080, , cuEventElapsedTime_v2)                      \
    X(cuModuleLoadData, 2000, , cuModuleLoadData)                              \
    X(cuModuleGetFunction, 2000, , cuModuleGetFunction)                        \
    X(cuFuncLoad, 12040, , cuFuncLoad)                                         \
    X(cuLaunchKernel, 4000, , cuLaunchKernel)                                  \
    X(cuLaunchKernel, 7000, _ptsz, cuLaunchKernel_ptsz)                        \
    X(cuLaunchHostFunc, 10000, , cuLaunchHostFunc)                             \
    X(cuLaunchHostFunc, 10000, _ptsz, cuLaunchHostFunc_ptsz)                   \
    /* process checkpoint */                                                   \
    X(cuCheckpointProcessGetRestoreThreadId, 12080, ,                          \
      cuCheckpointProcessGetRestoreThreadId)                                   \
    X(cuCheckpointProcessGetState, 12080, , cuCheckpointProcessGetState)       \
    X(cuCheckpointProcessLock, 12080, , cuCheckpointProcessLock)               \
    X(cuCheckpointProcessCheckpoint, 12080, , cuCheckpointProcessCheckpoint)   \
    X(cuCheckpointProcessRestore, 12080, , cuCheckpointProcessRestore)         \
    X(cuCheckpointProcessUnlock, 12080, , cuCheckpointProcessUnlock)

/* The hidden aliases (see FAKE_LOCAL_ALIAS), defined next to each function. */
#define FAKE_PROC_DECLARE(name, ver, suffix, sym) \
    extern __typeof__(sym) fake_local_##sym __attribute__((visibility("hidden")));
FAKE_PROCS(FAKE_PROC_DECLARE)

/* The compile-time check of each row against cudaTypedefs.h. */
#define FAKE_PROC_CHECK(name, ver, suffix, sym)                                          \
    _Static_assert(__builtin_types_compatible_p(PFN_##name##_v##ver##suffix, __typeof__(&sym)), \
                   #sym " is not PFN_" #name "_v" #ver #suffix);
FAKE_PROCS(FAKE_PROC_CHECK)

struct proc {
    const char *name;   /* base name, as callers ask for it */
    int version;        /* CUDA version that introduced this variant */
    int per_thread;     /* the _ptds/_ptsz variant */
    const char *symbol; /* our exported name */
    void *fn;
};

#define FAKE_PROC_ROW(name, ver, suffix, sym) \
    { #name, ver, sizeof(#suffix) > 1, #sym, (void *)&fake_local_##sym },
static const struct proc g_procs[] = { FAKE_PROCS(FAKE_PROC_ROW) };
#define NPROCS (sizeof(g_procs) / sizeof(g_procs[0]))

int fake_proc_is_exported(const char *name)
{
    for (size_t i = 0; i < NPROCS; i++)
        if (strcmp(g_procs[i].symbol, name) == 0)
            return 1;
    return 0;
}

static CUresult lookup(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status)
{
    const cuuint64_t known = CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    if (!symbol || !pfn || (flags & ~known))
        return CUDA_ERROR_INVALID_VALUE;
    int want_pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const struct proc *best = NULL, *best_pt = NULL;
    int found = 0;
    for (size_t i = 0; i < NPROCS; i++) {
        const struct proc *p = &g_procs[i];
        if (strcmp(p->name, symbol) != 0)
            continue;
        found = 1;
        if (p->version > cudaVersion)
            continue;
        const struct proc **slot = p->per_thread ? &best_pt : &best;
        if (!*slot || p->version > (*slot)->version)
            *slot = p;
    }
    if (want_pt && best_pt)
        best = best_pt;
    *pfn = best ? best->fn : NULL;
    if (status)
        *status = best ? CU_GET_PROC_ADDRESS_SUCCESS
                : found ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                        : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return best ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

FAKE_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    FAKE_ENTER_NOINIT();
    return lookup(symbol, pfn, cudaVersion, flags, NULL);
}
FAKE_LOCAL_ALIAS(cuGetProcAddress)

FAKE_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                         CUdriverProcAddressQueryResult *symbolStatus)
{
    FAKE_ENTER_NOINIT();
    return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}
FAKE_LOCAL_ALIAS(cuGetProcAddress_v2)
