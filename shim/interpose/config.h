/* Shim settings, read once from the environment (gpuckpt run sets them).
 *   GPUCKPT_POOL_BASE    fixed virtual base of the pool (default 0x600000000000)
 *   GPUCKPT_POOL_SIZE    virtual size of each device's slice (default 256G)
 *   GPUCKPT_CHUNK_SIZE   physical mapping unit (default 32M)
 *   GPUCKPT_POOL_RETAIN  free mapped bytes kept per device for reuse (default 1G)
 *   GPUCKPT_STAGING_PIECE  unit in which staging memory is prepared and pinned
 *                        (default: one memfd, at most 256M; rounded up to pages;
 *                        tests set it small so copies cross pieces)
 *   GPUCKPT_STAGING_FILE bytes per staging memfd (default 32M, more when
 *                        GPCK_MAX_STAGING_FILES would not hold them)
 *   GPUCKPT_HOST_RETAIN  most bytes of a suspend's held host memory kept,
 *                        lazily freed, for the next suspend (default: all;
 *                        0: none; spare_memory.h says why)
 *   GPUCKPT_RUN_DIR      directory of control sockets (default
 *                        $XDG_RUNTIME_DIR/gpuckpt, else /tmp/gpuckpt-<uid>)
 *   GPUCKPT_NCCL_TIMEOUT seconds an NCCL communicator's rebuild may take
 *                        before it is given up (default 120: a rank that
 *                        never joins must not hold the control thread)
 *   GPUCKPT_DRIVER_ZEROS keep: leave the zero pages of the driver's host copy
 *                        of the device state in place at a suspend (default:
 *                        drop, control/driver_zeros.h)
 *   GPUCKPT_DISABLE      1: load fully inert (pure pass-through, no gate)
 * Sizes take K, M, G, T suffixes (powers of 1024). */
#ifndef GPUCKPT_CONFIG_H
#define GPUCKPT_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#define GP_DEFAULT_POOL_BASE 0x600000000000ull
#define GP_DEFAULT_SLICE_SIZE (256ull << 30)
#define GP_DEFAULT_CHUNK_SIZE (32ull << 20)
#define GP_DEFAULT_RETAIN (1ull << 30)
/* 0: a piece is a memfd, up to 256 MiB (see staging.c). */
#define GP_DEFAULT_STAGING_PIECE 0ull
#define GP_DEFAULT_HOST_RETAIN UINT64_MAX
#define GP_DEFAULT_NCCL_TIMEOUT_S 120ull
/* Bytes per staging memfd (at least: GPCK_MAX_STAGING_FILES bounds the
 * count). Small, so a small staging is still many files faulted in by as
 * many threads, and a copy's first piece is ready soon: an incremental
 * image's 1.7 GB (16 GiB pool, 10 % changed, 2x H200) as 7 files of 256 MiB
 * were copied 0.2 s after the pause began and first written at 0.27-0.30 s;
 * as 52 of 32 MiB, first written at 0.16-0.18 s (64 MiB: 0.22-0.26 s). */
#define GP_DEFAULT_STAGING_FILE (32ull << 20)
/* cudaMalloc guarantees 256-byte alignment and in practice hands out 512;
 * large blocks start on 2 MiB so they share as few chunks as possible. */
#define GP_QUANTUM 512ull
#define GP_LARGE_ALIGN (2ull << 20)

struct gp_config {
    uint64_t pool_base;
    uint64_t slice_size;
    uint64_t chunk_size;
    uint64_t retain_bytes;
    uint64_t staging_piece;
    uint64_t staging_file;
    uint64_t host_retain;
    uint64_t nccl_timeout_s;
    bool keep_driver_zeros;
    bool keep_stacks; /* GPUCKPT_STACKS=keep: contexts' stacks checkpointed as they are */
    bool disabled;
    char run_dir[256];
};

/* 0, or -EINVAL naming the bad variable in the log. */
int gp_config_load(struct gp_config *out);
/* Parses "123", "0x7f", "64G"...; -EINVAL on junk or overflow. */
int gp_parse_size(const char *s, uint64_t *out);

#endif
