/* Every entry point of the list, exported under libcuda's own symbol name
 * (programs linked with -lcuda bind here first under LD_PRELOAD) and handed
 * out by the dlsym / cuGetProcAddress hooks in place of the real one.
 * Each passes the gate; routed ones run the shim's own implementation. */
#include "cuda_api.h"
#include "gate.h"
#include "real_driver.h"
#include "routed.h"

/* The real entry point must exist in this driver; a program linked against
 * a newer libcuda than the one installed gets CUDA_ERROR_NOT_SUPPORTED. */
#define GP_WRAPPER(name, params, call)                                \
    GP_EXPORT CUresult name params                                    \
    {                                                                 \
        if (__builtin_expect(!gp_real_loaded(), 0) && gp_real_init()) \
            return CUDA_ERROR_NO_DEVICE;                              \
        if (!GP_HAS_REAL(name))                                       \
            return CUDA_ERROR_NOT_SUPPORTED;                          \
        gp_gate_enter();                                              \
        CUresult r = call;                                            \
        gp_gate_exit();                                               \
        return r;                                                     \
    }
#define GP_GATED(name, params, args) GP_WRAPPER(name, params, GP_REAL(name) args)
#define GP_ROUTED(name, params, args) GP_WRAPPER(name, params, gp_routed_##name args)
#include "gated_functions.gen.h"

void *const gp_wrappers[GP_IDX_COUNT] = {
#define GP_GATED(name, params, args) (void *)&name,
#define GP_ROUTED(name, params, args) (void *)&name,
#define GP_UNGATED(name, params, args) NULL,
#include "gated_functions.gen.h"
};
