/* Staging memory: a memfd mapping registered with cuMemHostRegister, so the
 * copy engines write pool data straight into memory the controller maps too
 * (the fd goes over the control socket). DMA into registered memory runs at
 * the link's speed; into pageable memory at a quarter of it. */
#ifndef GPUCKPT_STAGING_H
#define GPUCKPT_STAGING_H

#include <stdbool.h>
#include <stdint.h>

#include "cuda_api.h"

struct gp_staging {
    int fd;
    uint8_t *base;
    uint64_t size;
    bool registered;
};

/* Staging memory a suspend keeps, unmapped and unpinned: only its memfd,
 * so the data survives the driver checkpoint (which must not find pinned
 * host memory) and the controller's exit. fd -1: none. */
struct gp_held {
    int fd;
    uint64_t size;
};

/* 0 or -errno; registration failures are not fatal (copies still work,
 * slower) and leave registered false. */
int gp_staging_create(uint64_t size, int device, struct gp_staging *out, uint64_t *register_ns);
/* Maps and pins the held memory again (held keeps its own fd); -ENOENT if none. */
int gp_staging_adopt(const struct gp_held *held, int device, struct gp_staging *out, uint64_t *register_ns);
/* Unpins and unmaps s, keeping its memfd in held (whatever held had is dropped). */
void gp_staging_hold(struct gp_staging *s, struct gp_held *held);
void gp_held_drop(struct gp_held *held);
void gp_staging_destroy(struct gp_staging *s);

#endif
