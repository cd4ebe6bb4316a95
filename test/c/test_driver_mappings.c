/* Unit tests of the records of the driver's own mappings
 * (shim/interpose/driver_mappings.c): which mappings are recorded, what
 * makes a record go, that an unmap of recorded memory waits for a scan
 * while others do not, and that errno and fork behave. This program
 * stands for libcuda: its own calls are the driver's. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "driver_mappings.h"
#include "harness.h"

#define MIB (1ul << 20)

static struct gp_mapping seen[GP_DRIVER_MAPPINGS_MAX];
static unsigned nseen;

static int copy_records(const struct gp_mapping *m, unsigned n, void *arg)
{
    (void)arg;
    memcpy(seen, m, n * sizeof(m[0]));
    nseen = n;
    return 0;
}

/* Whether [p, p + n) is recorded, as one record. */
static bool recorded(const void *p, size_t n)
{
    gp_driver_mappings_with(copy_records, NULL);
    for (unsigned i = 0; i < nseen; i++)
        if (seen[i].lo == (uintptr_t)p && seen[i].len == n)
            return true;
    return false;
}

static unsigned records(void)
{
    gp_driver_mappings_with(copy_records, NULL);
    return nseen;
}

static void *anon(size_t n, int flags)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, flags | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void test_records_large_private_anonymous_only(void)
{
    gp_driver_mappings_watch(true);
    void *big = anon(8 * MIB, MAP_PRIVATE), *small = anon(1 * MIB, MAP_PRIVATE), *shared = anon(8 * MIB, MAP_SHARED);
    CHECK(big && small && shared);
    void *odd = anon(8 * MIB + 100, MAP_PRIVATE);
    CHECK(recorded(big, 8 * MIB));
    CHECK(recorded(odd, 8 * MIB + (size_t)sysconf(_SC_PAGESIZE))); /* whole pages */
    CHECK(records() == 2);
    gp_driver_mappings_watch(false);
    CHECK(records() == 0);
    void *later = anon(8 * MIB, MAP_PRIVATE);
    CHECK(records() == 0); /* not watching */
    munmap(big, 8 * MIB);
    munmap(small, 1 * MIB);
    munmap(shared, 8 * MIB);
    munmap(odd, 8 * MIB + 100);
    munmap(later, 8 * MIB);
}

static void test_unmap_remap_or_map_over_forgets(void)
{
    gp_driver_mappings_watch(true);
    uint8_t *a = anon(8 * MIB, MAP_PRIVATE), *b = anon(8 * MIB, MAP_PRIVATE), *c = anon(8 * MIB, MAP_PRIVATE);
    CHECK(a && b && c && records() == 3);
    CHECK(munmap(a + 4 * MIB, 4 * MIB) == 0); /* part of it: the record goes */
    CHECK(!recorded(a, 8 * MIB) && records() == 2);
    uint8_t *moved = mremap(b, 8 * MIB, 16 * MIB, MREMAP_MAYMOVE);
    CHECK(moved != MAP_FAILED && !recorded(b, 8 * MIB) && records() == 1);
    void *over = mmap(c + MIB, MIB, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    CHECK(over != MAP_FAILED && records() == 0);
    gp_driver_mappings_watch(false);
    munmap(a, 4 * MIB);
    munmap(moved, 16 * MIB);
    munmap(c, 8 * MIB);
}

static void test_errno_kept(void)
{
    gp_driver_mappings_watch(true);
    void *a = anon(8 * MIB, MAP_PRIVATE);
    CHECK(a && records() == 1);
    errno = 0;
    CHECK(munmap((uint8_t *)a + 1, 4096) == -1 && errno == EINVAL); /* unaligned, with a record held */
    errno = 0;
    CHECK(mremap(a, 8 * MIB, 16 * MIB, MREMAP_FIXED, NULL) == MAP_FAILED && errno == EINVAL); /* FIXED needs MAYMOVE */
    CHECK(records() == 1);
    gp_driver_mappings_watch(false);
    munmap(a, 8 * MIB);
}

struct unmapper {
    void *p;
    size_t n;
    atomic_bool done;
};

static void *unmap_it(void *arg)
{
    struct unmapper *u = arg;
    munmap(u->p, u->n);
    atomic_store(&u->done, true);
    return NULL;
}

static bool done_within(struct unmapper *u, int ms)
{
    for (int i = 0; i < ms && !atomic_load(&u->done); i++) {
        struct timespec ts = { 0, 1000000L };
        nanosleep(&ts, NULL);
    }
    return atomic_load(&u->done);
}

static struct unmapper *mine, *other;

/* The scan's stand-in: an unmap of other memory ends meanwhile; one of recorded memory does not. */
static int scan(const struct gp_mapping *m, unsigned n, void *arg)
{
    (void)m;
    (void)n;
    pthread_t *a = arg, b;
    pthread_create(a, NULL, unmap_it, mine);
    pthread_create(&b, NULL, unmap_it, other);
    CHECK(done_within(other, 2000));
    CHECK(!done_within(mine, 100));
    pthread_join(b, NULL);
    return 0;
}

static void test_scan_holds_only_unmaps_of_recorded_memory(void)
{
    void *plain = anon(8 * MIB, MAP_PRIVATE); /* made while not watching */
    gp_driver_mappings_watch(true);
    void *rec = anon(8 * MIB, MAP_PRIVATE);
    CHECK(plain && rec && records() == 1 && recorded(rec, 8 * MIB));
    struct unmapper u_rec = { rec, 8 * MIB, false }, u_plain = { plain, 8 * MIB, false };
    mine = &u_rec;
    other = &u_plain;
    pthread_t a;
    gp_driver_mappings_with(scan, &a);
    CHECK(done_within(&u_rec, 2000)); /* once the scan is over */
    pthread_join(a, NULL);
    CHECK(records() == 0);
    gp_driver_mappings_watch(false);
}

static void test_child_forgets(void)
{
    gp_driver_mappings_watch(true);
    void *rec = anon(8 * MIB, MAP_PRIVATE);
    CHECK(rec && records() == 1);
    pid_t pid = fork();
    if (pid == 0)
        _exit(records() == 0 ? 0 : 1);
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(records() == 1);
    gp_driver_mappings_watch(false);
    munmap(rec, 8 * MIB);
}

static void test_nothing_before_the_driver_is_known(void)
{
    gp_driver_mappings_watch(true);
    void *p = anon(8 * MIB, MAP_PRIVATE);
    CHECK(p && records() == 0);
    gp_driver_mappings_watch(false);
    munmap(p, 8 * MIB);
}

int main(void)
{
    RUN(test_nothing_before_the_driver_is_known);
    /* This program is the driver from here on. */
    gp_driver_mappings_know_driver((const void *)main);
    RUN(test_records_large_private_anonymous_only);
    RUN(test_unmap_remap_or_map_over_forgets);
    RUN(test_errno_kept);
    RUN(test_scan_holds_only_unmaps_of_recorded_memory);
    RUN(test_child_forgets);
    return HARNESS_END();
}
