/* Copies between the pool and unpinned host memory through a small ring of
 * pinned slots: the copy engines fill (or drain) a slot at the link's speed
 * while worker threads move the bytes between the slots and the host
 * memory with memcpy.
 *
 * Why: a suspend's held memory used to be pinned whole. The driver pins
 * one registration at a time (16 GiB: 0.41-0.45 s from 1, 16 or 64
 * threads), and pinned memory must be unpinned before the driver's
 * checkpoint (0.27-0.31 s more). Through the ring nothing large is ever
 * pinned: 16 GiB went out in 0.65 s (faulting the memory in included) and
 * back in 0.44 s on an H200 host where the pinning pipeline took 0.73-0.88 s
 * plus 0.27 s of unpinning (test/gpu/probes/bounce.c). */
#ifndef GPUCKPT_BOUNCE_H
#define GPUCKPT_BOUNCE_H

#include <stdbool.h>
#include <stdint.h>

#include "../interpose/cuda_api.h"

struct gp_bounce;

/* One contiguous copy: len bytes between device memory dev (of device,
 * copied on stream) and host memory host. */
struct gp_bounce_span {
    int device;
    CUstream stream;
    CUdeviceptr dev;
    uint8_t *host;
    uint64_t len;
};

/* Maps and pins the ring (the calling thread's current context is
 * device's primary). 0 or -errno; *out NULL on failure. */
int gp_bounce_create(int device, struct gp_bounce **out);
/* Copies every span (to_host: device to host), and returns once all bytes
 * are in place, also after a failure (no DMA or memcpy is left running).
 * Called from the thread whose contexts the streams belong to (the control
 * thread). 0, -EIO (a CUDA call failed) or -EAGAIN (no worker thread could
 * start: nothing was copied). */
int gp_bounce_copy(struct gp_bounce *b, bool to_host, const struct gp_bounce_span *spans, uint32_t count);
/* Unpins and unmaps the ring; NULL is fine. */
void gp_bounce_destroy(struct gp_bounce *b);

#endif
