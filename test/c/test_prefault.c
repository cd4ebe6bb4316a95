/* Unit tests of faulting host memory in ahead of its first write
 * (shim/control/prefault.c): all of it is resident afterwards, no byte
 * changes, and a stop returns with the pieces under way done. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "prefault.h"

#define MIB (1ull << 20)

/* Pages of [p, p + n) resident in memory. */
static uint64_t resident_pages(uint8_t *p, uint64_t n)
{
    long page = sysconf(_SC_PAGESIZE);
    uint64_t count = n / (uint64_t)page, in = 0;
    unsigned char *v = malloc(count);
    if (!v || mincore(p, n, v)) {
        free(v);
        return 0;
    }
    for (uint64_t i = 0; i < count; i++)
        in += v[i] & 1;
    free(v);
    return in;
}

static uint8_t *fresh(uint64_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void test_all_of_it_faulted_in_unchanged(void)
{
    const uint64_t n = 100 * MIB + 4096; /* not whole pieces */
    uint8_t *p = fresh(n);
    CHECK(p && resident_pages(p, n) == 0);
    p[5 * MIB + 3] = 0x5a; /* written before: kept */
    p[n - 1] = 0xa5;
    gp_prefault_end(gp_prefault_start(p, n, 4), true);
    CHECK(resident_pages(p, n) == n / (uint64_t)sysconf(_SC_PAGESIZE));
    CHECK(p[5 * MIB + 3] == 0x5a && p[n - 1] == 0xa5 && p[0] == 0 && p[64 * MIB] == 0);
    munmap(p, n);
}

static void test_stop_leaves_the_rest(void)
{
    const uint64_t n = 4096 * MIB; /* far more than two threads fault in before the stop */
    uint8_t *p = fresh(n);
    CHECK(p != NULL);
    struct gp_prefault *f = gp_prefault_start(p, n, 2);
    CHECK(f != NULL);
    gp_prefault_end(f, false);
    uint64_t in = resident_pages(p, n);
    CHECK(in < n / (uint64_t)sysconf(_SC_PAGESIZE));
    munmap(p, n);
}

static void test_end_of_none_is_fine(void)
{
    gp_prefault_end(NULL, true);
    gp_prefault_end(NULL, false);
    CHECK(1);
}

int main(void)
{
    RUN(test_all_of_it_faulted_in_unchanged);
    RUN(test_stop_leaves_the_rest);
    RUN(test_end_of_none_is_fine);
    return HARNESS_END();
}
