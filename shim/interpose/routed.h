/* The shim's own implementations of the routed entry points (GP_ROUTED in
 * gated_functions.gen.h). wrappers.c calls them behind the gate. */
#ifndef GPUCKPT_ROUTED_H
#define GPUCKPT_ROUTED_H

#include "cuda_api.h"

#define GP_GATED(name, params, args)
#define GP_ROUTED(name, params, args) CUresult gp_routed_##name params;
#include "gated_functions.gen.h"

#endif
