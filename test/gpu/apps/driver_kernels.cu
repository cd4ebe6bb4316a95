/* Device code of driver_api.c, built alone into a fatbin
 * (nvcc -fatbin -gencode arch=compute_90,code=[sm_90,compute_90]) and
 * embedded into driver_api with bin2c: gt_fill_kernel and gt_checksum_kernel
 * from gputest.h, extern "C" so cuModuleGetFunction finds them by name. */
#define GT_KERNELS_ONLY
#include "gputest.h"
