/* The copies of a GPU-held snapshot (checkpoint --to-gpu, GPCK_PEER_SNAPSHOT
 * in the protocol header): the pool's chunks into memory on a GPU exported
 * by the controller, one allocation per run of adjacent chunks, and back.
 * Control thread only; 0 or -errno, the CUresult in *cu_err. */
#ifndef GPUCKPT_SNAPSHOT_COPY_H
#define GPUCKPT_SNAPSHOT_COPY_H

#include <stdbool.h>
#include <stdint.h>

#include "../interpose/cuda_api.h"
#include "gpuckpt_protocol.h"

/* fds[i] is one allocation for runs[i].chunks of device's chunks from
 * runs[i].addr on, each of which must hold live allocations (-ESTALE
 * otherwise, with nothing copied). Copies those chunks into the fds (out)
 * or back from them; keeps no fd. *touched: whether a copy was started (a
 * failure before it left everything as it was). */
int gp_snapshot_copy(int device, const struct gpck_chunk_run *runs, const int *fds, uint32_t n, bool out,
                      uint64_t *bytes, bool *touched, CUresult *cu_err);

#endif
