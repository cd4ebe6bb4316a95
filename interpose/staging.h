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
    int fd;                    /* the memfd; -1 for private staging */
    uint8_t *base;
    uint64_t size;
    bool registered;
    bool borrowed;             /* the held memory, mapped by the held record: only unpin it */
};

/* Staging memory a suspend keeps, mapped but unpinned, so the data
 * survives the driver checkpoint (which must not find pinned host memory)
 * and the controller's exit, and goes back in without being touched again.
 * base NULL: none. */
struct gp_held {
    int fd;
    uint8_t *base;
    uint64_t size;
};

/* Staging the controller maps too (a memfd, sent over the socket), or,
 * private, anonymous memory with transparent huge pages that only the shim
 * sees: on the H200 hosts 16 GiB of it is faulted in and pinned in 0.6 s,
 * against 3.6 s for a memfd (shmem gets no huge pages there). 0 or -errno;
 * registration failures are not fatal (copies still work, slower) and
 * leave registered false. */
int gp_staging_create(uint64_t size, bool private_memory, int device, struct gp_staging *out, uint64_t *register_ns);
/* Pins the held memory again, for copies back; -ENOENT if none. */
int gp_staging_adopt(const struct gp_held *held, int device, struct gp_staging *out, uint64_t *register_ns);
/* Unpins s and keeps it in held (whatever held had is dropped). */
void gp_staging_hold(struct gp_staging *s, struct gp_held *held);
void gp_held_drop(struct gp_held *held);
void gp_staging_destroy(struct gp_staging *s);

#endif
