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

/* 0 or -errno; registration failures are not fatal (copies still work,
 * slower) and leave registered false. */
int gp_staging_create(uint64_t size, int device, struct gp_staging *out, uint64_t *register_ns);
void gp_staging_destroy(struct gp_staging *s);

#endif
