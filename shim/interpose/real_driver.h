/* The real libcuda: loaded on first use, every entry point of the gated list
 * resolved once, and the map from a real entry point to the shim's wrapper
 * that dlsym and cuGetProcAddress hand out instead. */
#ifndef GPUCKPT_REAL_DRIVER_H
#define GPUCKPT_REAL_DRIVER_H

#include <stdbool.h>

#include "cuda_api.h"

enum gp_fn_index {
#define GP_GATED(name, params, args) GP_IDX_##name,
#define GP_ROUTED(name, params, args) GP_IDX_##name,
#define GP_UNGATED(name, params, args) GP_IDX_##name,
#include "gated_functions.gen.h"
    GP_IDX_COUNT
};

/* Typed pointers to the real entry points: GP_REAL(cuMemAlloc_v2)(&p, n). */
#define GP_GATED(name, params, args) typedef CUresult (*gp_pfn_##name) params;
#define GP_ROUTED(name, params, args) typedef CUresult (*gp_pfn_##name) params;
#define GP_UNGATED(name, params, args) typedef CUresult (*gp_pfn_##name) params;
#include "gated_functions.gen.h"

extern void *gp_real[GP_IDX_COUNT];
#define GP_REAL(name) ((gp_pfn_##name)gp_real[GP_IDX_##name])
#define GP_HAS_REAL(name) (gp_real[GP_IDX_##name] != NULL)

/* Loads libcuda.so.1 and resolves the table (once). -ENOENT: no driver on
 * this machine, and the shim stays inert. */
int gp_real_init(void);
bool gp_real_loaded(void);

/* dlsym that bypasses the shim's own dlsym hook. */
void *gp_real_dlsym(void *handle, const char *name);

/* The wrapper standing for a real entry point, or NULL if the pointer is not
 * one of libcuda's listed entry points. */
void *gp_wrapper_for(void *real_fn);
/* Entry points handed out unwrapped so far (not in the list). */
unsigned long gp_unwrapped_count(void);
void gp_note_unwrapped(const char *symbol);

#endif
