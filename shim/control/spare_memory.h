/* Host memory kept from one suspend's held copy for the next suspend.
 *
 * A suspend copies the pool into private anonymous memory; fresh from the
 * kernel, that memory must be faulted in and zeroed as the copy writes it,
 * which made the copy out of 16 GiB 0.55 s where the DMA alone takes 0.31 s
 * (on the H200 hosts, 16 threads: 0.40 s to fault in 16 GiB by writing it,
 * 0.26 s to write it again once faulted; test/gpu/probes/held_reuse.c).
 * After the resume, the memory is kept, lazily freed (MADV_FREE): the
 * kernel takes its pages back at the first memory pressure without writing
 * them anywhere, and the next suspend finds the rest still in place.
 *
 * The spare is private memory of the application's, so CRIU would dump it
 * as the application's own: it is unmapped before any suspend that does not
 * hold its data in private memory (every whole-process checkpoint).
 * GPUCKPT_HOST_RETAIN bounds it (config.h). */
#ifndef GPUCKPT_SPARE_MEMORY_H
#define GPUCKPT_SPARE_MEMORY_H

#include <stdbool.h>
#include <stdint.h>

/* Private anonymous memory of at least size bytes: the spare when it is
 * large enough, else a fresh mapping (huge pages advised; *fresh set).
 * *mapped: the bytes mapped at the result. NULL with errno set on failure. */
void *gp_spare_take(uint64_t size, uint64_t *mapped, bool *fresh);
/* Memory from gp_spare_take that is no longer needed: kept as the spare
 * (an older spare is unmapped), or unmapped when over GPUCKPT_HOST_RETAIN
 * or given after a drop and before the next take. */
void gp_spare_give(void *base, uint64_t mapped);
/* Unmaps the spare, if any, and keeps none until the next take. */
void gp_spare_drop(void);

#endif
