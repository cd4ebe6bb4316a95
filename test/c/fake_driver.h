/* The fake libcuda as a C unit test of the shim's control side calls it:
 * entry points by name, and the contexts the shim would retain. Included
 * by one file of each test program. */
#ifndef GPUCKPT_TEST_FAKE_DRIVER_H
#define GPUCKPT_TEST_FAKE_DRIVER_H

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "contexts.h"
#include "real_driver.h"

typedef CUresult (*pfn_init)(unsigned);
typedef CUresult (*pfn_retain)(CUcontext *, CUdevice);
typedef CUresult (*pfn_current)(CUcontext);

/* The fake's entry point name; the test ends (status 2) without it. */
static void *fn(const char *name)
{
    static void *lib;
    if (!lib && !(lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL))) {
        fprintf(stderr, "%s: %s\n", program_invocation_short_name, dlerror());
        exit(2);
    }
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "%s: the fake exports no %s\n", program_invocation_short_name, name);
        exit(2);
    }
    return p;
}

/* The shim's version retains once per process; the test's makes it current each time. */
int gp_contexts_use_primary(int device, CUresult *cu_err)
{
    CUcontext c;
    CUresult cu = ((pfn_retain)fn("cuDevicePrimaryCtxRetain"))(&c, device);
    if (cu == CUDA_SUCCESS)
        cu = ((pfn_current)fn("cuCtxSetCurrent"))(c);
    *cu_err = cu;
    return cu == CUDA_SUCCESS ? 0 : -EIO;
}

#endif
