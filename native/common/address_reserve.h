/* Address space for staging reserved at a 2 MiB boundary: files of huge
 * pages (staging on a tmpfs of them) are then mapped by whole huge pages,
 * which fault in, pin and unmap many times faster. Shared by the shim (its
 * staging) and the addon (the controller's view of it). */
#ifndef GPUCKPT_ADDRESS_RESERVE_H
#define GPUCKPT_ADDRESS_RESERVE_H

#include <stdint.h>
#include <sys/mman.h>

#define GP_RESERVE_ALIGN (2ULL << 20)
#define GP_RESERVE_PAGE 4096ULL

/* span bytes (rounded up to whole pages) of PROT_NONE address space whose
 * start lies where offset lies in a 2 MiB page, so that the byte at file
 * offset k of a mapping made there is at an address congruent to k;
 * MAP_FAILED (errno set) when none is to be had. offset: whole pages. */
static inline void *gp_reserve_aligned(uint64_t span, uint64_t offset)
{
    uint64_t whole = (span + GP_RESERVE_PAGE - 1) / GP_RESERVE_PAGE * GP_RESERVE_PAGE;
    uint8_t *p = (uint8_t *)mmap(0, whole + GP_RESERVE_ALIGN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == (uint8_t *)MAP_FAILED)
        return MAP_FAILED;
    uint64_t skip = (offset - (uint64_t)(uintptr_t)p) % GP_RESERVE_ALIGN;
    if (skip)
        munmap(p, skip);
    munmap(p + skip + whole, GP_RESERVE_ALIGN - skip);
    return p + skip;
}

#endif
