/* Unit tests of dropping the zero pages of the driver's host copy
 * (shim/control/driver_zeros.c), against records this file stands in for
 * (shim/interpose/driver_mappings.c keeps them in the shim): zero pages
 * go, every other byte stays, memory without access or no longer mapped
 * is left alone, and the records are forgotten. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "driver_mappings.h"
#include "driver_zeros.h"
#include "harness.h"

#define MIB (1ul << 20)

static struct gp_mapping records[GP_DRIVER_MAPPINGS_MAX];
static unsigned nrecords;
static int forgotten;

int gp_driver_mappings_with(int (*fn)(const struct gp_mapping *m, unsigned n, void *arg), void *arg)
{
    return fn(records, nrecords, arg);
}

void gp_driver_mappings_watch(bool on)
{
    if (!on) {
        nrecords = 0;
        forgotten++;
    }
}

static long page(void)
{
    return sysconf(_SC_PAGESIZE);
}

static uint8_t *anon(size_t n, int prot)
{
    void *p = mmap(NULL, n, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void record(const void *p, size_t n)
{
    records[nrecords++] = (struct gp_mapping){ (uintptr_t)p, n };
}

static bool resident(const uint8_t *p)
{
    unsigned char v = 0;
    return mincore((void *)p, (size_t)page(), &v) == 0 && (v & 1);
}

/* Page i of a copy: one page in three holds data, the others zeros written. */
static void fill(uint8_t *p, size_t pages)
{
    for (size_t i = 0; i < pages; i++)
        memset(p + i * (size_t)page(), i % 3 ? 0 : (int)(i % 255) + 1, (size_t)page());
}

static void test_zero_pages_go_data_stays(void)
{
    size_t pages = 24 * MIB / (size_t)page() + 5; /* not whole pieces of the scan */
    uint8_t *p = anon(pages * (size_t)page(), PROT_READ | PROT_WRITE);
    CHECK(p);
    if (!p)
        return;
    fill(p, pages);
    record(p, pages * (size_t)page());
    struct gp_zero_drop out;
    forgotten = 0;
    CHECK(gp_drop_driver_zeros(&out) == 0);
    size_t data = (pages + 2) / 3;
    CHECK(out.mappings == 1);
    CHECK(out.scanned == pages * (size_t)page());
    CHECK(out.dropped == (pages - data) * (size_t)page());
    CHECK(forgotten == 1 && nrecords == 0);
    for (size_t i = 0; i < pages; i++) {
        uint8_t *at = p + i * (size_t)page();
        if (i % 3) {
            CHECK(!resident(at));
            CHECK(at[0] == 0 && at[page() - 1] == 0);
        } else {
            CHECK(resident(at));
            CHECK(at[0] == (uint8_t)(i % 255 + 1) && at[page() - 1] == (uint8_t)(i % 255 + 1));
        }
    }
    munmap(p, pages * (size_t)page());
}

static void test_no_access_and_unmapped_left_alone(void)
{
    /* One record over memory the driver left without access, one over
     * memory unmapped since, one over readable memory between them. */
    size_t n = 8 * MIB;
    uint8_t *none = anon(n, PROT_NONE), *gone = anon(n, PROT_READ | PROT_WRITE), *rw = anon(n, PROT_READ | PROT_WRITE);
    CHECK(none && gone && rw);
    if (!none || !gone || !rw)
        return;
    memset(rw, 0, n);
    rw[n / 2] = 7;
    record(none, n);
    record(gone, n);
    record(rw, n);
    munmap(gone, n);
    struct gp_zero_drop out;
    CHECK(gp_drop_driver_zeros(&out) == 0);
    CHECK(out.mappings == 3);
    CHECK(out.scanned == n);
    CHECK(out.dropped == n - (size_t)page());
    CHECK(rw[n / 2] == 7 && resident(rw + n / 2));
    munmap(none, n);
    munmap(rw, n);
}

static void test_read_only_left_alone(void)
{
    /* Zero pages the process may only read stay: they are not the driver's copy. */
    size_t n = 4 * MIB;
    uint8_t *p = anon(n, PROT_READ | PROT_WRITE);
    CHECK(p);
    if (!p)
        return;
    memset(p, 0, n);
    mprotect(p, n, PROT_READ);
    record(p, n);
    struct gp_zero_drop out;
    CHECK(gp_drop_driver_zeros(&out) == 0);
    CHECK(out.scanned == 0 && out.dropped == 0);
    CHECK(resident(p));
    munmap(p, n);
}

static void test_nothing_recorded(void)
{
    struct gp_zero_drop out;
    CHECK(gp_drop_driver_zeros(&out) == 0);
    CHECK(out.mappings == 0 && out.scanned == 0 && out.dropped == 0);
}

int main(void)
{
    RUN(test_zero_pages_go_data_stays);
    RUN(test_no_access_and_unmapped_left_alone);
    RUN(test_read_only_left_alone);
    RUN(test_nothing_recorded);
    return HARNESS_END();
}
