/* Shim life cycle: inert at load; on the first successful cuInit it learns
 * the devices, reserves the pool and starts the control server. */
#ifndef GPUCKPT_SHIM_H
#define GPUCKPT_SHIM_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"

struct gp_shim_info {
    int device_count;
    int driver_version;
    int pool_state;           /* enum gpck_pool_state */
};

const struct gp_config *gp_shim_config(void);
void gp_shim_info(struct gp_shim_info *out);
/* Called after every successful cuInit; does its work once. */
void gp_shim_on_cuda_ready(void);
/* True when allocations should go to the pool; reserves it on first use if
 * cuInit-time reservation needed a context that did not exist yet. */
bool gp_shim_pool_usable(void);
/* Forked child of a CUDA process, or GPUCKPT_DISABLE=1: pure pass-through. */
bool gp_shim_passthrough(void);

#endif
