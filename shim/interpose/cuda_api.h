/* The one way the shim includes cuda.h.
 *
 * __CUDA_API_VERSION_INTERNAL makes cuda.h declare every exported name
 * (legacy, _v2, _ptds/_ptsz) and leave none of them as a macro, so the shim
 * can define wrappers under the exact symbol names libcuda exports. */
#ifndef GPUCKPT_CUDA_API_H
#define GPUCKPT_CUDA_API_H

#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
#include <cuda.h>

#define GP_EXPORT __attribute__((visibility("default")))

#endif
