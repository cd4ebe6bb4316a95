/* The driver's copy of the device state, taken at its checkpoint into host
 * memory it maps for itself, is mostly zero pages (0.61 of 0.63 GB for a
 * PyTorch job, 0.85-1.37 of 0.98-1.51 GB for a DDP rank, 2x H200), and
 * CRIU dumps whatever is present. Once the checkpoint is done nothing
 * writes that memory until the driver's restore reads it, so its zero
 * pages can go (MADV_DONTNEED): they read back as zeros. */
#ifndef GPUCKPT_DRIVER_ZEROS_H
#define GPUCKPT_DRIVER_ZEROS_H

#include <stdint.h>

struct gp_zero_drop {
    uint32_t mappings;  /* the driver's recorded mappings scanned */
    uint64_t scanned;   /* their bytes */
    uint64_t dropped;   /* of which zero pages, let go */
};

/* Scans what gp_driver_mappings_watch recorded (the parts of it that are
 * readable and writable private anonymous memory now), from several
 * threads, and drops its zero pages; forgets the records. 0, or -errno of
 * a madvise that was refused (its pages kept, the others dropped; out
 * counts what was). */
int gp_drop_driver_zeros(struct gp_zero_drop *out);

#endif
