/* A migrate's pool held in memory on another GPU (GPCK_PEER_HOLD,
 * GPCK_SUSPEND_HOLD_PEER in the protocol header).
 *
 * The controller allocates one chunk's worth of memory per chunk in use on
 * the GPU the process moves to and exports each as a POSIX fd. The shim
 * copies the chunks into it device to device (NVLink where the GPUs have
 * it) and keeps only the fds: the driver's checkpoint of the process sees
 * none of that memory, and it outlives the controller. The remap after the
 * driver's restore maps it at the chunks' addresses, with no copy at all,
 * or, where it lies on another GPU than the chunk's device (a resume
 * elsewhere, a failed migrate resumed in place), copies it into fresh
 * memory there. Control thread only; 0 or -errno, the CUresult in *cu_err.
 */
#ifndef GPUCKPT_PEER_HOLD_H
#define GPUCKPT_PEER_HOLD_H

#include <stdbool.h>
#include <stdint.h>

#include "../interpose/cuda_api.h"

/* Room for the fds of a hold of every chunk in use: the application's soft
 * RLIMIT_NOFILE is raised (up to its hard limit) if it is short, and put
 * back once the held fds are closed. -EMFILE when the hard limit is short. */
int gp_peer_make_room(void);
/* Copies chunks [first, first + count) of device's chunks in use into the
 * memory behind fds (one each) and keeps the fds, which are then the
 * module's; the caller keeps them on failure. first 0 starts over. Any
 * failure drops everything held so far. */
int gp_peer_hold(int device, uint64_t first, const int *fds, uint32_t count, uint64_t *bytes, uint64_t *chunks_held,
                 CUresult *cu_err);
/* Every chunk in use, on every device, is held (and there is one at least). */
bool gp_peer_held_complete(void);
bool gp_peer_held_any(void);
/* Closes the held fds: the memory goes back to its GPU. */
void gp_peer_drop(void);
/* The last hold's chunks are remembered (per device, their addresses)
 * after its fds go, for a checkpoint --leave-running: its controller keeps
 * copies of the fds across the CRIU dump, copies the data back in after the
 * remap, and reads the image from that memory while the application runs.
 *
 * Copies the memory behind fds into chunks [first, first + count) of the
 * last hold of device; keeps no fd. -ESTALE when the pool's chunks in use
 * are not those the hold had. */
int gp_peer_copy_in(int device, uint64_t first, const int *fds, uint32_t count, uint64_t *bytes, CUresult *cu_err);
/* Maps the memory behind fds where chunks [first, first + count) of the
 * last hold of device lie relative to each other, in a range of its own
 * (first 0 starts over); keeps no fd. Any failure drops device's mirror. */
int gp_peer_mirror(int device, uint64_t first, const int *fds, uint32_t count, uint64_t *bytes, CUresult *cu_err);
/* Where pool range [addr, addr + len) of device is in its mirror: 0 and
 * *at, or -EFAULT when the mirror does not map all of it. */
int gp_peer_mirror_at(int device, uint64_t addr, uint64_t len, uint64_t *at);
/* Takes fds as the held memory of chunks [first, first + count) of the
 * last hold of device, without copying (first 0 starts over): the fds are
 * then the module's, as after gp_peer_hold. */
int gp_peer_adopt(int device, uint64_t first, const int *fds, uint32_t count, uint64_t *chunks_held);
/* Unmaps every device's mirror: the memory goes back to its GPU. */
void gp_peer_mirror_drop(void);
/* Maps the pool again from the held memory. *bytes_copied: what lay on
 * another GPU and was copied. The fds are dropped once the data is all in
 * place; on failure the pool is released again and they stay held. */
int gp_peer_remap(uint64_t *bytes_mapped, uint64_t *bytes_copied, CUresult *cu_err);

#endif
