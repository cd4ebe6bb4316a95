/* Shim life cycle: inert at load; on the first successful cuInit it learns
 * the devices, reserves the pool and starts the control side, which
 * registered itself at load (the interposer does not depend on it). */
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

/* What the control side (shim/control) does at the shim's turning points. */
struct gp_control_hooks {
    int (*start)(const struct gp_config *cfg); /* CUDA is ready: 0 or -errno */
    void (*stop)(void);                        /* unload */
    void (*forget)(void);                      /* in a forked child */
    /* device is out of memory: let go of what gpuckpt holds on its GPU
     * for others (GPU-held snapshots), at least bytes if it can; 0 and
     * *freed, or -errno. May be NULL. */
    int (*reclaim)(int device, uint64_t bytes, uint64_t *freed);
};
/* The control side registers at load (a constructor of its own). */
void gp_shim_register_control(const struct gp_control_hooks *hooks);
/* The control side's reclaim, when it has one: 0 and *freed, or -errno. */
int gp_shim_reclaim(int device, uint64_t bytes, uint64_t *freed);

#endif
