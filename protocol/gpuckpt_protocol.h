/* The shim <-> controller protocol, generated from protocol/messages.mjs
 * by protocol/generate.mjs: do not edit; change the table. Shared by the
 * shim (shim/control/) and the node addon (native/).
 *
 * Transport: a Unix SOCK_SEQPACKET socket at <run dir>/<pid>.sock, mode 0600
 * in a 0700 directory owned by the user; the shim also refuses any peer whose
 * uid differs from its own (SO_PEERCRED). SEQPACKET keeps message boundaries
 * and carries the staging memfds with SCM_RIGHTS.
 *
 * Every message is one datagram: struct gpck_header, then payload_len bytes.
 * A reply carries the request's type | GPCK_REPLY, the same seq, and status 0
 * or -errno. Integers are host byte order (both ends run on one host).
 * An error reply whose cause was a driver call has GPCK_REPLY_ERROR_TEXT in
 * its header's flags and, as its payload, a NUL-terminated text naming the
 * call and its CUresult (at most GPCK_ERROR_TEXT_LEN bytes with the NUL).
 * Bump VERSION on any layout change; HELLO refuses a mismatch and the version
 * is written into every image manifest. */
#ifndef GPUCKPT_PROTOCOL_H
#define GPUCKPT_PROTOCOL_H

#include <stdint.h>

#define GPCK_PROTOCOL_VERSION 17u

#define GPCK_MAGIC 0x4b435047u /* "GPCK" little-endian */
#define GPCK_REPLY 0x8000u
#define GPCK_MAX_DEVICES 16u
#define GPCK_MAX_MESSAGE (128u * 1024u)

#define GPCK_MAX_COPY_RANGES 4000u /* 125 KiB of ranges: a pool without its zero blocks is many */
#define GPCK_MAX_LIST_ENTRIES 4096u
#define GPCK_NAME_LEN 256u
#define GPCK_PATH_LEN 1024u
#define GPCK_ERROR_TEXT_LEN 256u

enum gpck_type {
    GPCK_HELLO = 1,          /* gpck_hello_req -> gpck_hello_rep */
    GPCK_STATUS = 2,         /* (none) -> gpck_status_rep */
    GPCK_DEVICES = 3,        /* (none) -> gpck_devices_rep */
    GPCK_QUIESCE = 4,        /* gpck_quiesce_req -> gpck_quiesce_rep */
    GPCK_RESUME = 5,         /* (none) -> gpck_resume_rep */
    GPCK_LIST_ALLOCS = 6,    /* gpck_list_req -> gpck_list_rep */
    GPCK_STAGING_MAP = 7,    /* gpck_staging_req -> gpck_staging_rep: [+ memfds] both ways (SCM_RIGHTS) */
    GPCK_STAGING_UNMAP = 8,  /* (none) -> (none) */
    GPCK_COPY_OUT = 9,       /* gpck_copy_req -> gpck_copy_rep: pool -> staging */
    GPCK_COPY_IN = 10,       /* gpck_copy_req -> gpck_copy_rep: staging -> pool */
    GPCK_SUSPEND_POOL = 11,  /* gpck_suspend_req -> gpck_pool_rep: release the pool's memory */
    GPCK_REMAP_POOL = 12,    /* (none) -> gpck_pool_rep: map it again, take the gate */
    GPCK_DROP_HELD = 13,     /* gpck_suspend_req -> (none): the held data is saved elsewhere */
    GPCK_BLOCK_DIGEST = 14,  /* gpck_digest_req -> gpck_digest_rep: a digest per block of a range */
    GPCK_LIVE_WINDOW = 15,   /* gpck_live_req -> (none): copy and digest while the application runs */
    GPCK_PEER_HOLD = 16,     /* gpck_peer_req -> gpck_peer_rep: + fds: copy pool chunks into another GPU's memory */
    GPCK_NCCL_STATUS = 17,   /* (none) -> gpck_nccl_rep: the process's NCCL communicators and the cut */
    GPCK_NCCL_HOLD = 18,     /* gpck_nccl_hold_req -> gpck_nccl_rep: hold the cut, raise its targets, or release it */
    GPCK_NCCL_TEARDOWN = 19, /* (none) -> (none): destroy every communicator, at the cut */
    GPCK_NCCL_NEW_ID = 20,   /* (none) -> gpck_nccl_id: a unique id for a communicator's rebuild */
    GPCK_NCCL_REBUILD = 21,  /* gpck_nccl_rebuild_req -> (none): make one communicator again */
    GPCK_FRAMEWORK_FREE = 22, /* gpck_framework_req -> gpck_framework_rep: memory the framework's allocator holds unused, from its in-process hook */
    GPCK_CHUNK_EXPORT = 23,  /* gpck_chunk_export_req -> gpck_chunk_export_rep: + fds: the pool's chunks under a range, exported (peek, poke) */
    GPCK_DRIVER_ZEROS = 24,  /* (none) -> gpck_driver_zeros_rep: after the driver's checkpoint: drop the zero pages of its host copy */
    GPCK_HOLD_PUT = 40,      /* gpck_hold_put_req -> gpck_hold_rep: + fds: keep them as part of a snapshot */
    GPCK_HOLD_LIST = 41,     /* (none) -> gpck_hold_list_rep: the snapshots held */
    GPCK_HOLD_TAKE = 42,     /* gpck_hold_take_req -> gpck_hold_rep: copies of a snapshot part's fds */
    GPCK_HOLD_DROP = 43,     /* gpck_hold_drop_req -> gpck_hold_rep: let snapshots go */
    GPCK_HOLD_RECLAIM = 44,  /* gpck_hold_reclaim_req -> gpck_hold_rep: a GPU's memory is wanted: let its oldest snapshots go */
};

struct gpck_header {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint32_t seq;
    int32_t status;            /* replies: 0 or -errno */
    uint32_t payload_len;
    uint32_t flags;            /* replies: GPCK_REPLY_*; requests: 0 */
};

#define GPCK_REPLY_ERROR_TEXT 1u

struct gpck_hello_req {
    uint32_t client_version;
    uint32_t reserved;
};

/* Pool states reported in hello/status. */
enum gpck_pool_state {
    GPCK_POOL_NOT_YET = 0, /* CUDA initialised, no device memory routed yet */
    GPCK_POOL_ACTIVE = 1, /* the reservation is in place at the fixed base */
    GPCK_POOL_DISABLED = 2, /* could not reserve at the base: pass-through */
    GPCK_POOL_SUSPENDED = 3, /* physical memory released, application held */
    /* a rollback was cut off midway: the pool holds part of an image, so the
     * application stays held until a rollback (GPCK_QUIESCE_ROLLBACK)
     * completes */
    GPCK_POOL_HALF_RESTORED = 4,
};

struct gpck_hello_rep {
    uint32_t version;
    int32_t pid;
    uint32_t uid;
    uint32_t device_count;
    uint32_t pool_state;       /* enum gpck_pool_state */
    uint32_t driver_version;   /* cuDriverGetVersion */
    uint64_t pool_base;
    uint64_t slice_size;       /* per device: device d owns [base + d*slice, +slice) */
    uint64_t quantum;          /* allocation granularity and alignment */
    uint64_t chunk_size;       /* physical mapping unit */
};

enum gpck_gate_state {
    GPCK_GATE_OPEN = 0,
    GPCK_GATE_CLOSED = 1,
};

struct gpck_device_usage {
    uint64_t bytes_in_use;     /* live pool allocations */
    uint64_t bytes_mapped;     /* physical memory backing the pool */
    uint64_t allocations;
    uint64_t chunks_in_use;    /* chunks holding live allocations: what a remap maps */
};

struct gpck_status_rep {
    uint32_t gate_state;       /* enum gpck_gate_state */
    uint32_t pool_state;       /* enum gpck_pool_state */
    uint32_t device_count;
    uint32_t reserved;
    uint64_t outside_managed;  /* cuMemAllocManaged */
    uint64_t outside_stream_ordered; /* cuMemAllocAsync / FromPoolAsync */
    uint64_t outside_host;     /* cuMemAllocHost / cuMemHostAlloc */
    uint64_t outside_unrouted; /* device memory the pool could not serve */
    uint64_t gated_calls;      /* driver calls that passed the gate */
    struct gpck_device_usage devices[GPCK_MAX_DEVICES];
    char held_image[GPCK_PATH_LEN]; /* while suspended: where the pool's data is */
};

struct gpck_device_info {
    int32_t ordinal;
    int32_t cc_major;
    int32_t cc_minor;
    uint32_t reserved;
    uint64_t total_memory;
    uint8_t uuid[16];
    char name[GPCK_NAME_LEN];
};

struct gpck_devices_rep {
    uint32_t count;
    uint32_t reserved;
    struct gpck_device_info devices[GPCK_MAX_DEVICES];
};

/* GPCK_QUIESCE_ROLLBACK: the pause is for writing an image back into the
 * running pool (restore --into). Only such a pause may COPY_IN into a
 * running process, and only it may take a half-restored one. From its
 * first COPY_IN until one with GPCK_COPY_COMPLETES succeeds, the pool
 * holds a mix of the image and what was there: a controller lost then (or
 * a RESUME) leaves the application held (GPCK_POOL_HALF_RESTORED) rather
 * than running on the mix; lost after it, the application runs on. */
#define GPCK_QUIESCE_ROLLBACK 1u

struct gpck_quiesce_req {
    /* If the controller sends nothing for this long while the gate is
     * closed, the shim reopens it: a hung controller cannot stall the app
     * for ever. A controller that dies closes the socket, which reopens the
     * gate at once. 0 = the default (GPCK_DEFAULT_LEASE_MS). */
    uint32_t lease_ms;
    uint32_t flags;            /* GPCK_QUIESCE_* */
};

#define GPCK_DEFAULT_LEASE_MS 30000u
struct gpck_quiesce_rep {
    uint64_t drain_ns;         /* waiting for calls in flight */
    uint64_t sync_ns;          /* synchronising every context */
};

struct gpck_resume_rep {
    uint64_t closed_ns;        /* how long the gate was closed */
};

struct gpck_list_req {
    uint64_t start_addr;       /* first address to list (resume point) */
    uint32_t max_entries;      /* <= GPCK_MAX_LIST_ENTRIES */
    uint32_t reserved;
};

struct gpck_alloc_entry {
    uint32_t device;
    uint32_t reserved;
    uint64_t addr;
    uint64_t size;
};

struct gpck_list_rep {
    uint32_t count;
    uint32_t more;             /* 1: call again from next_addr */
    uint64_t next_addr;
    struct gpck_alloc_entry entries[]; /* count entries */
};

/* GPCK_STAGING_HELD: pin again the staging memory a suspend kept (size is
 * ignored; the reply gives it). -ENOENT when none is held.
 * GPCK_STAGING_PRIVATE: memory only the shim sees (no memfd is sent), for
 * data that goes back to the GPU without the controller reading it; it
 * gets huge pages, so it is had several times faster.
 * GPCK_STAGING_READY: reply only once every byte is faulted in and
 * pinned. Without it the memory is prepared in the background and each
 * copy waits for the pieces it uses: that overlaps preparation with the
 * DMA (suspend, resume), but puts it inside the application's pause (a
 * live checkpoint wants the pause to be the DMA alone).
 * GPCK_STAGING_GIVEN: the controller made the memfds (and may have filled
 * them already: a restore decompresses while CRIU brings the process back,
 * before there is a shim to ask) and sends them with the request, files of
 * file_bytes each (the last one up to size), laid end to end. Each must be a
 * regular file sealed against shrinking (F_SEAL_SHRINK: a file cut short
 * under the mapping would fault the application), or one that can never be
 * sealed, unlinked, on a tmpfs (staging on huge pages, which only the fds'
 * holders reach), and as large as its part.
 * The shim maps and closes them, and prepares them as its own memfds; the
 * reply passes none back. An application out of fds gets -EMFILE, its
 * connection kept: the controller then asks for staging the shim makes.
 * GPCK_STAGING_UNPINNED, with GPCK_STAGING_GIVEN: the files hold their data
 * already (a restore decompressed it while CRIU ran), so pinning them could
 * no longer overlap anything: copies go through the bounce ring (bounce.h)
 * instead, nothing of the files is pinned. Without it the files are pinned
 * in the background while the controller fills them, and the DMA runs
 * straight from them at the link's speed (a rollback's pause). */
#define GPCK_STAGING_HELD 1u
#define GPCK_STAGING_PRIVATE 2u
#define GPCK_STAGING_READY 4u
#define GPCK_STAGING_GIVEN 8u
#define GPCK_STAGING_UNPINNED 16u

struct gpck_staging_req {
    uint64_t size;
    uint32_t flags;            /* GPCK_STAGING_* */
    uint32_t files;            /* GPCK_STAGING_GIVEN: memfds sent with it; else 0 */
    uint64_t file_bytes;       /* GPCK_STAGING_GIVEN: bytes of each but the last; else 0 */
};

/* Shared staging is several memfds laid end to end, file_bytes each (the
 * last one shorter), passed in this order: the kernel faults in pages of
 * one memfd one thread at a time (16 GiB: 2.7 s from 8, 16 or 32 threads,
 * and 0.46 s as 32 memfds from 32 threads, on an H200 host).
 * SCM_RIGHTS carries at most 253 fds. */
#define GPCK_MAX_STAGING_FILES 250u

struct gpck_staging_rep {
    uint64_t size;
    uint64_t register_ns;      /* time to answer: the memory is faulted in and pinned in the background after, and each copy waits for what it uses */
    uint64_t file_bytes;       /* bytes of each memfd but the last; 0: no memfd passed */
    uint32_t files;            /* memfds passed with the reply */
    uint32_t reserved;
};

struct gpck_copy_range {
    uint32_t device;
    uint32_t reserved;
    uint64_t addr;             /* pool address: must lie inside one live allocation */
    uint64_t length;
    uint64_t staging_offset;   /* must lie inside the mapped staging memory */
};

/* GPCK_COPY_COMPLETES (COPY_IN): with this request the image's data is all
 * in the pool, so a controller lost afterwards no longer leaves the
 * application held (rollback) or released again (resume).
 * GPCK_COPY_ZEROS (COPY_IN only): the ranges are set to zero on the GPU
 * (at HBM speed) instead of copied: the blocks an image or a suspend found
 * all zeros (BLOCK_DIGEST 0) never cross the link. Nothing of staging is
 * read, none need be mapped, and each range's staging_offset must be 0;
 * the ranges are checked as any copy in's.
 * GPCK_COPY_FROM_MIRROR (COPY_OUT only): the ranges are read from the
 * memory a GPCK_PEER_MIRROR mapped (the pool as it was at the last peer
 * hold) instead of from the pool: each range, in pool addresses, must lie
 * inside chunks the mirror maps. Allowed while the application runs,
 * without the gate: nothing writes that memory. */
#define GPCK_COPY_COMPLETES 1u
#define GPCK_COPY_ZEROS 2u
#define GPCK_COPY_FROM_MIRROR 4u

struct gpck_copy_req {
    uint32_t count;            /* <= GPCK_MAX_COPY_RANGES */
    uint32_t flags;            /* GPCK_COPY_* */
    struct gpck_copy_range ranges[];
};

struct gpck_copy_rep {
    uint64_t bytes;
    uint64_t ns;
};

/* Block digests (the shim's GPU kernel, shim/control/block_digest.cu) of up
 * to GPCK_MAX_DIGEST_RANGES ranges of one device, each 8-byte aligned and
 * inside one live allocation, while the sender holds the gate: for each
 * range in order, digests for [addr + i*block_size, min(addr + (i+1) *
 * block_size, addr + length)); 0 means all zeros. block_size: a multiple of
 * GPCK_MIN_DIGEST_BLOCK; at most GPCK_MAX_DIGESTS blocks in all. count 0
 * only loads the kernel, whole (CUDA's lazy loading would load it at its
 * first launch), so that this is not inside a pause; it needs no gate,
 * only a process the driver has not frozen (-EPERM while suspended).
 * -ENOSYS: the driver will not load or run the kernel. */
#define GPCK_MAX_DIGESTS 16000u

#define GPCK_MAX_DIGEST_RANGES 1024u
#define GPCK_MIN_DIGEST_BLOCK 4096u
struct gpck_digest_range {
    uint64_t addr;
    uint64_t length;
};

struct gpck_digest_req {
    uint32_t device;
    uint32_t count;            /* <= GPCK_MAX_DIGEST_RANGES */
    uint64_t block_size;
    struct gpck_digest_range ranges[];
};

struct gpck_digest_rep {
    uint64_t blocks;
    uint64_t ns;
    uint64_t digests[];        /* 8 bytes LE per block */
};

/* A full digest reply, and a full copy request, fit in one message (with the header). */
#ifdef __cplusplus
#define GPCK_FITS_A_MESSAGE static_assert
#else
#define GPCK_FITS_A_MESSAGE _Static_assert
#endif
GPCK_FITS_A_MESSAGE(sizeof(struct gpck_header) + sizeof(struct gpck_digest_rep) + GPCK_MAX_DIGESTS * sizeof(uint64_t) <= GPCK_MAX_MESSAGE,
                    "GPCK_MAX_DIGESTS does not fit a message");
GPCK_FITS_A_MESSAGE(sizeof(struct gpck_header) + sizeof(struct gpck_copy_req) + GPCK_MAX_COPY_RANGES * sizeof(struct gpck_copy_range) <= GPCK_MAX_MESSAGE,
                    "GPCK_MAX_COPY_RANGES does not fit a message");

/* Live window (checkpoint --live): while the sender's window is open,
 * COPY_OUT and BLOCK_DIGEST need no gate. Their ranges then need only lie
 * in mapped pool memory, because the application may free what is being read.
 * So the pool keeps every chunk mapped until the last window closes: a
 * freed chunk is unmapped at that point. The copies and digests are then
 * not consistent: the controller compares digests to find the blocks that
 * changed and copies those again. The final copy is made while it holds the
 * gate. Open needs a running pool (-EPERM otherwise). While any window is
 * open, SUSPEND_POOL is refused with -EBUSY. Closing the socket closes the
 * window. */
struct gpck_live_req {
    uint32_t open;             /* 1: open, 0: close */
    uint32_t reserved;
};

/* Suspend: the sender holds the gate and has saved the pool's data (at
 * image, or in the staging memory with GPCK_SUSPEND_HOLD_STAGING). The
 * shim releases every chunk's physical memory but keeps the reservation and
 * every allocation, and keeps the application held: the gate stays closed
 * across disconnects until a REMAP_POOL and a RESUME.
 * GPCK_SUSPEND_HOLD_STAGING: the sender's staging memory holds the data;
 * the shim unpins and unmaps it but keeps its memfd, so the data lives as
 * long as the application, until GPCK_DROP_HELD or the RESUME.
 * GPCK_DROP_HELD: while suspended, the data now lies at image (or with
 * the sender); the held memory, or the held fds of a peer hold, are freed.
 * GPCK_SUSPEND_HOLD_PEER: GPCK_PEER_HOLD requests put every chunk in use
 * into memory on other GPUs; the shim keeps their fds (only the fds, so the
 * driver's checkpoint sees none of it), and the next REMAP_POOL maps that
 * memory at the chunks' addresses, or copies it there when it lies on
 * another GPU than the chunk's. -EINVAL (nothing released) while any chunk
 * in use is not held. */
#define GPCK_SUSPEND_HOLD_STAGING 1u
#define GPCK_SUSPEND_HOLD_PEER 2u

struct gpck_suspend_req {
    uint32_t flags;            /* GPCK_SUSPEND_* */
    uint32_t reserved;
    char image[GPCK_PATH_LEN];
};

/* Remap: physical memory for every chunk holding live allocations, on the
 * same device ordinals (after a driver restore onto other GPUs, those
 * ordinals are the new GPUs). The sender then holds the gate, to copy the
 * data in and RESUME; after GPCK_SUSPEND_HOLD_PEER the data is in place
 * already, and the sender only RESUMEs. -ENOMEM: the GPU lacks the memory; the pool stays
 * released and the application held. */
struct gpck_pool_rep {
    uint64_t bytes;
    uint64_t ns;
    uint64_t bytes_copied;     /* remap from peer memory on another GPU than the chunk's */
};

/* Peer hold (a migrate through NVLink): the controller allocates memory of
 * chunk_size bytes per chunk on the GPU the process moves to and sends one
 * exported POSIX fd (cuMemExportToShareableHandle) per chunk. The shim
 * imports them, copies chunks [first, first + count) of device's chunks in
 * use (address order, GPCK_STATUS counts them) into them device to device,
 * drops its imports and keeps the fds. Sent by the gate's holder while the
 * pool runs, in order from first 0 (which starts over); the fds are the
 * request's (at most GPCK_MAX_STAGING_FILES). Sent without fds first, it
 * makes room for them: the application's soft RLIMIT_NOFILE is raised up
 * to its hard limit if the fds of every chunk in use would not fit (and
 * put back once they are closed); -EMFILE when even the hard limit is too
 * low, and the controller goes through host memory. A hold that fails in the
 * shim's copy or its checks drops every held fd (refused before that,
 * nothing changes: -EPROTO, -EPERM without the gate, -EBUSY with a live
 * window open, -EMFILE when the fds did not fit); the pool is untouched
 * either way. A RESUME, a SUSPEND_POOL without GPCK_SUSPEND_HOLD_PEER, or
 * the holder leaving drops them too.
 * GPCK_PEER_INTO_POOL: the other way, for a pool remapped after a
 * suspend whose peer hold was dropped (GPCK_DROP_HELD) while the sender
 * kept its own copies of the fds (checkpoint --leave-running: CRIU cannot
 * dump a process holding them). Sent by the holder of the gate after
 * REMAP_POOL: copies the memory behind fds into chunks [first, first +
 * count) of the last hold's chunks (the same addresses the pool has again;
 * -ESTALE otherwise), and keeps no fd. With GPCK_PEER_COMPLETES the data is
 * all in, as with GPCK_COPY_COMPLETES.
 * GPCK_PEER_MIRROR: maps the memory behind fds, read only for the shim's
 * copies out (GPCK_COPY_FROM_MIRROR), at the relative places the last
 * hold's chunks [first, first + count) had; keeps no fd (the mappings keep
 * the memory). Any time the pool runs, no gate needed; first 0 starts a new
 * mirror. The mirror goes when its sender leaves, or at the next hold.
 * GPCK_PEER_ADOPT: while suspended with no hold (after GPCK_DROP_HELD), the
 * shim takes the fds back as the hold of the last hold's chunks [first,
 * first + count), without copying: the sender could not copy them back in
 * and leaves the process suspended with its data on the GPU, for the next
 * REMAP_POOL to map. In order from first 0; sent without fds first, it makes
 * room for them as a hold does. -EBUSY unless suspended.
 * GPCK_PEER_SNAPSHOT: a GPU-held snapshot (checkpoint --to-gpu). The fd
 * of runs[i] is one allocation of runs[i].chunks chunks, for the pool's
 * chunks from runs[i].addr on, each of which must hold live allocations now
 * (-ESTALE otherwise, before anything is copied). Alone: copies those
 * chunks out into the fds, by the holder of the gate while the pool runs.
 * With GPCK_PEER_INTO_POOL: copies them back in, by the holder of the gate
 * in a rollback (QUIESCE with GPCK_QUIESCE_ROLLBACK); GPCK_PEER_COMPLETES
 * then as above. Either way the shim keeps no fd, and first is ignored. */
#define GPCK_PEER_INTO_POOL 1u
#define GPCK_PEER_COMPLETES 2u
#define GPCK_PEER_MIRROR 4u
#define GPCK_PEER_ADOPT 8u
#define GPCK_PEER_SNAPSHOT 16u

struct gpck_chunk_run {
    uint64_t addr;             /* the first chunk */
    uint64_t chunks;           /* adjacent chunks from addr, all in the one allocation behind its fd */
};

struct gpck_peer_req {
    uint32_t device;           /* the pool's device ordinal (slice) */
    uint32_t flags;            /* 0: hold (above); GPCK_PEER_INTO_POOL, GPCK_PEER_MIRROR or GPCK_PEER_ADOPT */
    uint64_t first;
    uint32_t count;            /* GPCK_PEER_SNAPSHOT: runs given, one per fd; else 0 */
    uint32_t reserved;
    struct gpck_chunk_run runs[];
};

struct gpck_peer_rep {
    uint64_t bytes;            /* copied by this request */
    uint64_t ns;
    uint64_t chunks_held;      /* of device, so far */
};

/* CHUNK_EXPORT: the chunks under [addr, addr + length), which must lie
 * inside one live allocation (-EFAULT otherwise: outside the pool, or memory
 * no allocation holds), each exported as a POSIX fd (at most
 * GPCK_MAX_STAGING_FILES chunks: -E2BIG), so that another process can map
 * them into the CPU (gpuckpt peek and poke). Any client, no gate: what the
 * memory holds is the application's business; a poke holds the gate first. */
struct gpck_chunk_export_req {
    uint64_t addr;
    uint64_t length;
};

struct gpck_chunk_export_rep {
    uint64_t first;            /* the first chunk's address: fd i is the chunk at first + i * chunk_size */
    uint32_t device;
    uint32_t count;            /* fds passed with the reply */
};

/* GPU-held snapshots (checkpoint --gpu-only --to-gpu): memory on a GPU
 * holding a copy of a pool's chunks in use, exported as POSIX fds, kept by
 * the snapshot holder (native/holder/), a small process of its own with no
 * CUDA context, so that it outlives the controller. A snapshot has parts,
 * one per GPU its memory is on; each part is its fds in the order of the
 * chunks they copy (the addresses are in the snapshot's description, beside
 * the run dir, written by the controller). HOLD_PUT sends a part's fds in
 * order from first 0, at most GPCK_MAX_STAGING_FILES a request; id 0 on the
 * first request of the first part makes a new snapshot, whose id the reply
 * gives; GPCK_HOLD_LAST on the last request of the last part completes it
 * (only a complete snapshot is listed as such, taken or reclaimed). A
 * snapshot goes on HOLD_DROP, when its process ends (or its PID names
 * another process: start_time), or on HOLD_RECLAIM, oldest first, when an
 * application on its GPU runs out of memory, unless GPCK_HOLD_KEEP made it
 * (a pool's only copy while CRIU dumps its process: gpu-snapshot.ts), which
 * only its own process's HOLD_RECLAIM lets go (it runs on its pool). The
 * holder ends once it holds nothing and no client is connected. */
#define GPCK_HOLD_LAST 1u
#define GPCK_HOLD_KEEP 2u

struct gpck_hold_put_req {
    uint64_t id;               /* 0: a new snapshot (first 0 of part 0) */
    uint64_t start_time;       /* field 22 of the process's /proc/PID/stat */
    uint64_t bytes;            /* of memory behind the fds of this request */
    uint64_t first;            /* the part's fds sent before these */
    int32_t pid;
    uint32_t part;
    uint32_t flags;            /* GPCK_HOLD_* */
    uint32_t reserved;
    uint8_t uuid[16];          /* the GPU the memory is on; all zeros: host memory (a suspended pool's staging memfds) */
};

struct gpck_hold_rep {
    uint64_t id;
    uint64_t bytes;            /* PUT: held in the part so far; DROP, RECLAIM: let go; TAKE: 0 */
    uint32_t count;            /* PUT: fds in the part so far; TAKE: fds passed; DROP, RECLAIM: snapshots let go */
    uint32_t reserved;
};

#define GPCK_MAX_HOLD_ENTRIES 1024u
/* A held snapshot as HOLD_LIST gives it: complete (GPCK_HOLD_LAST came),
 * and kept (GPCK_HOLD_KEEP: a pool's only copy, not a user's snapshot).
 * COMPLETE is bit 0 of what was a boolean, so an older reader still sees it. */
#define GPCK_HOLD_COMPLETE 1u
#define GPCK_HOLD_KEPT 2u

struct gpck_hold_entry {
    uint64_t id;
    uint64_t bytes;
    uint64_t created_ms;       /* CLOCK_REALTIME */
    int32_t pid;
    uint32_t part;
    uint32_t fds;
    uint32_t flags;            /* GPCK_HOLD_COMPLETE, GPCK_HOLD_KEPT */
    uint8_t uuid[16];
};

struct gpck_hold_list_rep {
    uint32_t count;
    uint32_t holder_pid;
    struct gpck_hold_entry entries[]; /* one per part */
};

/* A full list of held snapshots fits one message (with the header). */
#ifdef __cplusplus
#define GPCK_FITS_A_MESSAGE static_assert
#else
#define GPCK_FITS_A_MESSAGE _Static_assert
#endif
GPCK_FITS_A_MESSAGE(sizeof(struct gpck_header) + sizeof(struct gpck_hold_list_rep) + GPCK_MAX_HOLD_ENTRIES * sizeof(struct gpck_hold_entry) <= GPCK_MAX_MESSAGE,
                    "GPCK_MAX_HOLD_ENTRIES does not fit a message");

struct gpck_hold_take_req {
    uint64_t id;
    uint64_t first;
    uint32_t part;
    uint32_t count;            /* at most GPCK_MAX_STAGING_FILES */
};

struct gpck_hold_drop_req {
    uint64_t id;               /* 0: every snapshot of pid (pid 0: all) */
    int32_t pid;
    uint32_t reserved;
};

struct gpck_hold_reclaim_req {
    uint64_t bytes;
    uint8_t uuid[16];
};

/* NCCL (shim/collective/): the communicators of one process that a
 * status lists, and the targets one hold sets. The cut stops every rank
 * of a job at the same collective boundary: NCCL_HOLD without targets
 * makes every unit (a collective or point-to-point call outside a group,
 * a group, making or ending a communicator) wait before it starts; with
 * targets, units on a communicator pass while its count of units (ops)
 * is below its target. The controller raises the targets of every rank
 * to the highest ops + inflight of any, until all report no unit under
 * way and ops == target (GPCK_NCCL_REACHED). Then NCCL_TEARDOWN destroys
 * every communicator; after the checkpoint, each one's rank 0 process
 * gives an NCCL_NEW_ID, NCCL_REBUILD makes it again on every rank at
 * once, and NCCL_HOLD with GPCK_NCCL_RELEASE lets the job go on. The
 * holder leaving releases the cut unless a communicator is torn down:
 * the job then waits for a controller's rebuild (gpuckpt resume). NCCL_HOLD
 * -EBUSY: another controller holds it. NCCL_TEARDOWN -EBUSY: the cut is
 * not reached. NCCL_REBUILD -ENOENT: no such key; -EALREADY: it is up.
 * Failures of NCCL itself: -EIO with an error text. */
#define GPCK_MAX_COMMS 64u

#define GPCK_COMM_DOWN 1u
#define GPCK_COMM_MULTI_DEVICE 2u

struct gpck_nccl_comm {
    uint64_t key;              /* the same in every process of the communicator */
    uint64_t ops;              /* units completed on it */
    uint64_t target;
    int32_t nranks;
    int32_t rank;
    int32_t device;
    uint32_t inflight;         /* units under way that will count on it */
    uint32_t registrations;    /* ncclCommRegister buffers: a rebuild cannot carry them */
    uint32_t windows;          /* ncclCommWindowRegister windows: likewise */
    uint32_t custom_ops;       /* ncclRedOpCreatePreMulSum ops: likewise */
    uint32_t flags;            /* GPCK_COMM_* */
};

#define GPCK_NCCL_HELD 1u
#define GPCK_NCCL_REACHED 2u
#define GPCK_NCCL_HELD_BY_SENDER 4u

struct gpck_nccl_rep {
    uint32_t count;
    uint32_t busy;             /* units under way */
    uint32_t waiting;          /* threads waiting at the cut */
    uint32_t flags;            /* GPCK_NCCL_* */
    uint64_t mem_allocations;  /* ncclMemAlloc blocks outstanding: a rebuild cannot carry them */
    struct gpck_nccl_comm comms[GPCK_MAX_COMMS];
};

#define GPCK_NCCL_RELEASE 1u

struct gpck_nccl_target {
    uint64_t key;
    uint64_t target;
};

struct gpck_nccl_hold_req {
    uint32_t flags;            /* GPCK_NCCL_RELEASE, or 0: hold */
    uint32_t count;
    struct gpck_nccl_target targets[];
};

struct gpck_nccl_id {
    uint8_t id[128];
};

struct gpck_nccl_rebuild_req {
    uint64_t key;
    uint8_t id[128];
};

/* What FRAMEWORK_FREE learnt from the in-process hook (shim/python/). */
enum gpck_framework_state {
    GPCK_FRAMEWORK_NO_HOOK = 0, /* no hook in this process: nothing to ask */
    /* ranges hold the memory the framework holds but no tensor uses */
    GPCK_FRAMEWORK_RANGES = 1,
    GPCK_FRAMEWORK_IDLE = 2, /* a hook, but no framework using the GPU in this process */
    /* the hook could not read the framework consistently: why says why */
    GPCK_FRAMEWORK_FAILED = 3,
};

#define GPCK_MAX_FREE_RANGES 8000u /* the largest ranges first; smaller ones are copied */
struct gpck_framework_req {
    uint32_t timeout_ms;       /* how long to wait for the hook */
    uint32_t reserved;
};

struct gpck_free_range {
    uint64_t addr;
    uint64_t size;
};

struct gpck_framework_rep {
    uint32_t state;            /* GPCK_FRAMEWORK_* */
    uint32_t count;
    char framework[32];        /* the framework's name, e.g. PyTorch */
    char why[GPCK_NAME_LEN];   /* GPCK_FRAMEWORK_FAILED: the reason, one line */
    struct gpck_free_range ranges[];
};

/* While suspended, once the driver's checkpoint has returned: the host
 * memory the driver mapped for its copy of the device state since the
 * SUSPEND_POOL is scanned and its zero pages dropped, so that CRIU does not
 * dump them (they read back as zeros for the driver's restore). Nothing
 * recorded (another driver, GPUCKPT_DRIVER_ZEROS=keep) is 0 mappings.
 * -EINVAL: not suspended. */
struct gpck_driver_zeros_rep {
    uint32_t mappings;
    uint32_t reserved;
    uint64_t scanned_bytes;
    uint64_t dropped_bytes;
    uint64_t ns;
};

#endif
