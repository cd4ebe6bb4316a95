/* How applications obtain driver entry points, and where the shim swaps in
 * its wrappers: dlsym/dlvsym on libcuda (cudart loads libcuda with dlopen),
 * and cuGetProcAddress(_v2), through which cudart takes every other entry
 * point. The real call picks the variant (cudaVersion, per-thread-stream
 * flags); the shim then hands out the wrapper of exactly that variant. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

#include "cuda_api.h"
#include "real_driver.h"
#include "routed.h"

static void *wrap(void *real, const char *symbol)
{
    void *w = gp_wrapper_for(real);
    if (w)
        return w;
    gp_note_unwrapped(symbol);
    return real;
}

CUresult gp_routed_cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *symbolStatus)
{
    CUresult r = GP_REAL(cuGetProcAddress_v2)(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (r == CUDA_SUCCESS && pfn && *pfn)
        *pfn = wrap(*pfn, symbol);
    return r;
}

CUresult gp_routed_cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    CUresult r = GP_REAL(cuGetProcAddress)(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn && *pfn)
        *pfn = wrap(*pfn, symbol);
    return r;
}

/* Only dlsym is hooked: dlvsym must stay glibc's own, since it is how the
 * shim finds the real dlsym (gp_real_dlsym). */
static int looks_like_driver_symbol(const char *name)
{
    return name && name[0] == 'c' && name[1] == 'u' && name[2] >= 'A' && name[2] <= 'Z';
}

GP_EXPORT void *dlsym(void *handle, const char *name)
{
    void *p = gp_real_dlsym(handle, name);
    if (!p || !looks_like_driver_symbol(name))
        return p;
    void *w = gp_wrapper_for(p);
    return w ? w : p;
}
