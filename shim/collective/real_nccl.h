/* The real NCCL, behind the shim's wrappers: found among the libraries the
 * process has loaded (libnccl.so*), whatever namespace loaded it, and
 * called with the calling thread marked as inside NCCL, so that calls NCCL
 * makes to its own exported functions pass the wrappers untouched. */
#ifndef GPUCKPT_REAL_NCCL_H
#define GPUCKPT_REAL_NCCL_H

#include <stdbool.h>

/* The real entry point, or NULL when no libnccl is loaded or it lacks it. */
void *gp_nccl_real(const char *name);

/* Typed, cached per call site: GP_NCCL_REAL(ncclCommDestroy, (ncclComm_t)). */
#define GP_NCCL_REAL(name, params)                                                                               \
    ({                                                                                                         \
        static void *fn_;                                                                                      \
        if (!fn_)                                                                                              \
            fn_ = gp_nccl_real(#name);                                                                         \
        (ncclResult_t(*) params) fn_;                                                                          \
    })

/* The calling thread is inside a real NCCL call (its own calls back into
 * exported functions are NCCL's business, not the application's). */
bool gp_nccl_inside(void);
void gp_nccl_enter_real(void);
void gp_nccl_leave_real(void);

#endif
