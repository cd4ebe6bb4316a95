/* Faulting host memory in ahead of its first write, from several threads.
 *
 * Memory fresh from the kernel is faulted in and zeroed as it is first
 * written: a suspend's first copy into private memory ran at 33 GB/s
 * where the same copy into memory already faulted in ran at 44 GB/s (16
 * GiB pool, H200 host). The checks and the digests before that copy
 * leave the CPU idle for tens of milliseconds: faulting in the start of
 * the memory meanwhile (MADV_POPULATE_WRITE, which changes no byte) makes
 * that much of the copy run at the faster speed. The bounce ring's own
 * 256 MiB are faulted in the same way, from several threads. */
#ifndef GPUCKPT_PREFAULT_H
#define GPUCKPT_PREFAULT_H

#include <stdbool.h>
#include <stdint.h>

struct gp_prefault;

/* Faults [p, p + n) in, writable, without changing a byte: others may be
 * writing data into it meanwhile (MADV_POPULATE_WRITE; before Linux 5.14,
 * an atomic no-op write per page). */
void gp_populate(uint8_t *p, uint64_t n);

/* Starts faulting [base, base + size) in, from its start on, on up to
 * threads threads. NULL when none could start (nothing is faulted in:
 * the memory is still correct, only slower to write first). */
struct gp_prefault *gp_prefault_start(uint8_t *base, uint64_t size, int threads);
/* finish: waits until all of it is faulted in; else stops after the pieces
 * under way (a few milliseconds). Frees p; NULL is fine. */
void gp_prefault_end(struct gp_prefault *p, bool finish);

#endif
