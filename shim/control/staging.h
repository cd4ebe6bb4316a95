/* Staging memory: where pool data lies in host memory. Either memfds the
 * controller maps too (the fds go over the control socket, either way), laid end to
 * end so both sides see one range (GPCK_MAX_STAGING_FILES says why), or private
 * anonymous memory with transparent huge pages that only the shim sees (a
 * suspend's held copy).
 *
 * The memfds are registered with cuMemHostRegister, so the copy engines write
 * pool data straight into it at the link's speed (into pageable memory they
 * reach a quarter of it). Getting 16 GiB of it ready costs more than the
 * DMA itself (on the H200 hosts: faulting in 0.44-0.8 s as many memfds,
 * 2.7 s as one; pinning 0.41-0.45 s; DMA 0.31 s), so it is prepared in the
 * background, a memfd a piece, by several threads, and a copy waits only
 * for the pieces it touches:
 * preparation overlaps the application's quiesce and the DMA of the pieces
 * before.
 *
 * Private staging, and held memory copied back, are never pinned: copies
 * go through a bounce ring (bounce.h), since the held memory must be
 * unpinned again before the driver's checkpoint. */
#ifndef GPUCKPT_STAGING_H
#define GPUCKPT_STAGING_H

#include <stdbool.h>
#include <stdint.h>

#include "../interpose/cuda_api.h"
#include "gpuckpt_protocol.h"

struct gp_staging_prep; /* the background preparation (staging.c) */
struct gp_bounce;

struct gp_staging {
    int fds[GPCK_MAX_STAGING_FILES]; /* the memfds, in order, until sent; none for private staging */
    uint32_t nfds;
    uint64_t file_bytes;       /* bytes of each memfd but the last */
    uint8_t *base;
    uint64_t size;
    bool borrowed;             /* the held memory, mapped by the held record: not unmapped with s */
    bool anon;                 /* private memory from spare_memory.h, given back there */
    bool huge_pages;           /* the controller's files on a tmpfs of huge pages */
    struct gp_staging_prep *prep;
    struct gp_bounce *bounce;  /* set: copies go through it, nothing of base is pinned */
    struct gp_prefault *prefault; /* fresh private memory faulted in until the first copy (prefault.h) */
};

/* Staging memory a suspend keeps, mapped but unpinned, so the data
 * survives the driver checkpoint (pinned host memory makes it 0.3 s slower
 * and its restore 0.25 s slower, measured) and the controller's exit, and
 * goes back in without being touched again. Its memfds are closed: the
 * mapping keeps them, and nothing else needs them. base NULL: none. */
struct gp_held {
    uint8_t *base;
    uint64_t size;
    bool anon; /* private memory from spare_memory.h, given back there */
};

/* Maps size bytes (private memory: at least size, the spare of
 * spare_memory.h when it is large enough); a memfd starts faulting them in and pinning them in the
 * background (contents are never written by that), private memory gets a
 * bounce ring. 0 or -errno; registration failures are not fatal (copies
 * still work, slower). */
int gp_staging_create(uint64_t size, bool private_memory, int device, struct gp_staging *out);
/* Staging the controller made (GPCK_STAGING_GIVEN): nfds files of
 * file_bytes each (the last one up to size) mapped end to end and prepared
 * as gp_staging_create's memfds, or with unpinned, given a bounce ring
 * (GPCK_STAGING_UNPINNED). The fds are always closed, whatever the
 * outcome: the mapping keeps the memory. -EINVAL for files that are not as
 * the protocol header says (too few, too small, not sealed against shrinking). */
int gp_staging_take(const int *fds, uint32_t nfds, uint64_t size, uint64_t file_bytes, bool unpinned, int device,
                    struct gp_staging *out);
/* The held memory again, with a bounce ring, for copies back; -ENOENT if none. */
int gp_staging_adopt(const struct gp_held *held, int device, struct gp_staging *out);
/* A copy is about to use s: what is faulting it in ahead stops. */
void gp_staging_copy_starts(struct gp_staging *s);
/* Waits until [offset, offset+length) is faulted in and pinned (or its
 * pinning failed), and returns where the next piece boundary after offset
 * lies: one DMA must not span two registrations. */
uint64_t gp_staging_ready(struct gp_staging *s, uint64_t offset);
/* Waits until every piece is faulted in and pinned (or failed to pin). */
void gp_staging_wait_all(struct gp_staging *s);
/* Closes s's memfds once the controller has them: the mappings keep the
 * memory, and an application near its fd limit is not left up to
 * GPCK_MAX_STAGING_FILES fds short. */
void gp_staging_close_files(struct gp_staging *s);
/* Unpins s (or drops its ring) and keeps it in held (whatever held had is dropped). */
void gp_staging_hold(struct gp_staging *s, struct gp_held *held);
void gp_held_drop(struct gp_held *held);
/* Stops what prepares s and unpins it, s staying mapped: the part of
 * gp_staging_destroy the driver's checkpoint must not see undone. */
void gp_staging_unpin(struct gp_staging *s);
void gp_staging_destroy(struct gp_staging *s);
/* Both, on a thread of their own: unpinning 16 GiB takes 0.3 s, and
 * unmapping it takes time too, that an application already running again
 * need not wait for. */
void gp_staging_release_later(struct gp_staging *s, struct gp_held *held);
/* Returns once no such release runs: before the driver or CRIU saves the
 * process, whose pinned and spare memory must be gone by then, and before
 * held memory is borrowed again (one may still be unpinning it). */
void gp_staging_releases_wait(void);

#endif
