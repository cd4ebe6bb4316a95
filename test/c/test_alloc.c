/* Unit tests for the address-range allocator (shim/pool/alloc.c).
 *
 * Build and run:
 *   gcc -O2 -std=c11 -Wall -Wextra -Werror -pthread -Ishim/pool shim/pool/alloc.c \
 *       test/c/test_alloc.c -o /tmp/test_alloc && /tmp/test_alloc
 *
 * Prints `ok NAME` or `FAIL NAME: file:line: expr` per test, then one line
 * `N passed, N failed`; exits 1 if any test failed. Lines starting with `#`
 * are informational (timings) and never decide pass or fail.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime; -std=c11 hides it otherwise */

#include "alloc.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- harness ----------------------------------------------------------- */

struct failure {
    bool failed;
    const char *file;
    int line;
    const char *expr;
};

/* Tests run one at a time on the main thread; worker threads never touch it
 * (they report back through their own structs). */
static struct failure current_failure;

/* Keeps the FIRST failure: later ones are usually fallout of it. */
static void record_failure(const char *file, int line, const char *expr)
{
    if (current_failure.failed)
        return;
    current_failure = (struct failure){true, file, line, expr};
}

/* In void test functions: record and leave the test. */
#define CHECK(expr)                                                                                \
    do {                                                                                           \
        if (!(expr)) {                                                                             \
            record_failure(__FILE__, __LINE__, #expr);                                             \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* In bool helpers: record (so the report names the helper's line) and return
 * false, which the caller CHECKs in turn. */
#define REQUIRE(expr)                                                                              \
    do {                                                                                           \
        if (!(expr)) {                                                                             \
            record_failure(__FILE__, __LINE__, #expr);                                             \
            return false;                                                                          \
        }                                                                                          \
    } while (0)

/* ---- shared helpers ---------------------------------------------------- */

/* splitmix64: tiny, seedable, good enough to drive the tests reproducibly. */
static uint64_t rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rng_below(uint64_t *state, uint64_t bound) { return rng_next(state) % bound; }

static uint64_t round_up(uint64_t x, uint64_t align) { return (x + align - 1) / align * align; }

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static struct gp_alloc_stats stats_of(const struct gp_alloc *a)
{
    struct gp_alloc_stats s;
    gp_alloc_stats(a, &s);
    return s;
}

static bool stats_equal(struct gp_alloc_stats x, struct gp_alloc_stats y)
{
    return x.bytes_in_use == y.bytes_in_use && x.count == y.count &&
           x.largest_free == y.largest_free && x.free_extents == y.free_extents &&
           x.high_water == y.high_water;
}

/* Collects what foreach visits, to compare listings. */
struct extent_list {
    struct gp_extent *items;
    size_t count;
    size_t capacity;
    size_t stop_after; /* return 42 once this many were seen; 0: never */
};

static int collect_extent(const struct gp_extent *e, void *arg)
{
    struct extent_list *list = arg;
    if (list->count < list->capacity)
        list->items[list->count] = *e;
    list->count++;
    if (list->stop_after && list->count == list->stop_after)
        return 42;
    return 0;
}

static bool extents_equal(const struct gp_extent *x, const struct gp_extent *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (x[i].addr != y[i].addr || x[i].size != y[i].size)
            return false;
    return true;
}

/* ---- create / argument validation -------------------------------------- */

static void test_create_invalid(void)
{
    struct gp_alloc *a = NULL;
    const uint64_t q = 4096;
    CHECK(gp_alloc_create(0, 1 << 20, 0, &a) == -EINVAL);        /* quantum 0 */
    CHECK(gp_alloc_create(0, 3 * 1000, 1000, &a) == -EINVAL);    /* quantum not 2^k */
    CHECK(gp_alloc_create(q / 2, 1 << 20, q, &a) == -EINVAL);    /* base unaligned */
    CHECK(gp_alloc_create(0, (1 << 20) + 1, q, &a) == -EINVAL);  /* size unaligned */
    CHECK(gp_alloc_create(q, 0, q, &a) == -EINVAL);              /* empty range */
    CHECK(gp_alloc_create(0, 1 << 20, q, NULL) == -EINVAL);
    /* base + size would reach 2^64 exactly: the end cannot be represented. */
    CHECK(gp_alloc_create(UINT64_MAX - 2 * q + 1, 2 * q, q, &a) == -EINVAL);
    CHECK(gp_alloc_create(1ull << 63, 1ull << 63, q, &a) == -EINVAL);
    CHECK(a == NULL);

    /* The highest representable range works, and nothing there can wrap. */
    CHECK(gp_alloc_create(UINT64_MAX - 2 * q + 1, q, q, &a) == 0);
    uint64_t addr;
    CHECK(gp_alloc_get(a, UINT64_MAX, q, &addr) == -ENOMEM);
    CHECK(gp_alloc_get(a, UINT64_MAX - q, q, &addr) == -ENOMEM);
    CHECK(gp_alloc_get(a, 1, 1ull << 63, &addr) == -ENOMEM);
    CHECK(gp_alloc_get(a, q, q, &addr) == 0);
    CHECK(addr == UINT64_MAX - 2 * q + 1);
    struct gp_extent e;
    CHECK(gp_alloc_find(a, UINT64_MAX - q, &e) == 0 && e.addr == addr);
    CHECK(gp_alloc_find(a, UINT64_MAX - q + 1, &e) == -ENOENT); /* one past end */
    CHECK(gp_alloc_find(a, UINT64_MAX, &e) == -ENOENT);
    CHECK(stats_of(a).high_water == q);
    CHECK(gp_alloc_put(a, addr, NULL) == 0);
    gp_alloc_destroy(a);
    gp_alloc_destroy(NULL); /* a no-op, like free(NULL) */
}

static void test_get_put_invalid(void)
{
    const uint64_t base = 0x10000, q = 4096, size = 64 * q;
    struct gp_alloc *a;
    CHECK(gp_alloc_create(base, size, q, &a) == 0);
    uint64_t addr;
    CHECK(gp_alloc_get(a, 0, q, &addr) == -EINVAL);      /* size 0 */
    CHECK(gp_alloc_get(a, q, 0, &addr) == -EINVAL);      /* align 0 */
    CHECK(gp_alloc_get(a, q, 3 * q, &addr) == -EINVAL);  /* align not 2^k */
    CHECK(gp_alloc_get(a, q, q + 1, &addr) == -EINVAL);
    CHECK(gp_alloc_get(a, q, q, NULL) == -EINVAL);
    CHECK(gp_alloc_get(NULL, q, q, &addr) == -EINVAL);
    CHECK(gp_alloc_get(a, size + 1, q, &addr) == -ENOMEM);     /* bigger than range */
    CHECK(gp_alloc_get(a, UINT64_MAX, q, &addr) == -ENOMEM);   /* rounding would wrap */
    CHECK(gp_alloc_get(a, 1, 1ull << 63, &addr) == -ENOMEM);   /* no such aligned addr */
    CHECK(stats_of(a).count == 0 && stats_of(a).largest_free == size);

    uint64_t first, second;
    CHECK(gp_alloc_get(a, 2 * q, q, &first) == 0);
    CHECK(gp_alloc_get(a, q, q, &second) == 0);
    struct gp_alloc_stats before = stats_of(a);
    CHECK(gp_alloc_put(a, first + q, NULL) == -ENOENT);        /* interior pointer */
    CHECK(gp_alloc_put(a, first + 1, NULL) == -ENOENT);
    CHECK(gp_alloc_put(a, base - q, NULL) == -ENOENT);         /* below the range */
    CHECK(gp_alloc_put(a, base + size, NULL) == -ENOENT);      /* past the range */
    CHECK(gp_alloc_put(a, second + q, NULL) == -ENOENT);       /* start of free tail */
    CHECK(gp_alloc_put(a, UINT64_MAX, NULL) == -ENOENT);
    CHECK(stats_equal(before, stats_of(a)));

    uint64_t freed_size = 0;
    CHECK(gp_alloc_put(a, first, &freed_size) == 0 && freed_size == 2 * q);
    before = stats_of(a);
    CHECK(gp_alloc_put(a, first, &freed_size) == -ENOENT);     /* double free */
    CHECK(stats_equal(before, stats_of(a)));
    CHECK(gp_alloc_put(NULL, first, NULL) == -EINVAL);

    struct gp_extent e;
    CHECK(gp_alloc_find(a, second, NULL) == -EINVAL);
    CHECK(gp_alloc_find(NULL, second, &e) == -EINVAL);
    CHECK(gp_alloc_foreach(a, NULL, NULL) == -EINVAL);
    CHECK(gp_alloc_foreach_in(a, base, base + size, NULL, NULL) == -EINVAL);
    gp_alloc_destroy(a);
}

/* ---- placement --------------------------------------------------------- */

static void test_alignment_and_rounding(void)
{
    /* base is deliberately aligned to the quantum only, so any alignment
     * above it must really be searched for. */
    const uint64_t q = 256, base = 0x7f0000000000ull + 3 * q, size = 1ull << 32;
    struct gp_alloc *a;
    CHECK(gp_alloc_create(base, size, q, &a) == 0);
    uint64_t rng = 1;
    for (int i = 0; i < 2000; i++) {
        uint64_t want = 1 + rng_below(&rng, 1 << 20);
        uint64_t align = 1ull << rng_below(&rng, 22); /* 1 B .. 2 MiB, some below q */
        uint64_t addr;
        CHECK(gp_alloc_get(a, want, align, &addr) == 0);
        CHECK(addr % align == 0);
        CHECK(addr % q == 0);
        struct gp_extent e;
        CHECK(gp_alloc_find(a, addr, &e) == 0);
        CHECK(e.addr == addr && e.size == round_up(want, q));
        if (i % 3 == 0) {
            uint64_t freed;
            CHECK(gp_alloc_put(a, addr, &freed) == 0 && freed == round_up(want, q));
        }
    }
    gp_alloc_destroy(a);
}

/* Two allocators fed the same seeded workload must answer identically. */
static void test_first_fit_determinism(void)
{
    const uint64_t q = 512, base = 1ull << 40, size = 1ull << 26;
    struct gp_alloc *x, *y;
    CHECK(gp_alloc_create(base, size, q, &x) == 0);
    CHECK(gp_alloc_create(base, size, q, &y) == 0);
    enum { SLOTS = 512 };
    uint64_t live[SLOTS] = {0}; /* 0: empty slot (base is never 0 here) */
    uint64_t rng = 12345;
    for (int i = 0; i < 50000; i++) {
        size_t slot = rng_below(&rng, SLOTS);
        if (live[slot]) {
            CHECK(gp_alloc_put(x, live[slot], NULL) == 0);
            CHECK(gp_alloc_put(y, live[slot], NULL) == 0);
            live[slot] = 0;
            continue;
        }
        uint64_t want = 1 + rng_below(&rng, 64 * q);
        uint64_t align = q << rng_below(&rng, 6);
        uint64_t ax = 0, ay = 0;
        int rx = gp_alloc_get(x, want, align, &ax);
        int ry = gp_alloc_get(y, want, align, &ay);
        CHECK(rx == ry);
        CHECK(ax == ay);
        if (rx == 0)
            live[slot] = ax;
    }
    CHECK(stats_equal(stats_of(x), stats_of(y)));
    gp_alloc_destroy(x);
    gp_alloc_destroy(y);
}

static void test_fragmentation(void)
{
    enum { BLOCKS = 100 };
    const uint64_t q = 4096, block = 4 * q, base = 0x200000, size = 1024 * q;
    struct gp_alloc *a;
    CHECK(gp_alloc_create(base, size, q, &a) == 0);
    uint64_t addrs[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        CHECK(gp_alloc_get(a, block, q, &addrs[i]) == 0);
        CHECK(addrs[i] == base + (uint64_t)i * block); /* first fit packs densely */
    }
    for (int i = 0; i < BLOCKS; i += 2)
        CHECK(gp_alloc_put(a, addrs[i], NULL) == 0);
    struct gp_alloc_stats s = stats_of(a);
    CHECK(s.free_extents == BLOCKS / 2 + 1); /* 50 holes and the tail */
    CHECK(s.count == BLOCKS / 2);
    CHECK(s.high_water == BLOCKS * block);

    /* Too big for any hole: lands past all of them, at the tail. */
    uint64_t big;
    CHECK(gp_alloc_get(a, 2 * block, q, &big) == 0);
    CHECK(big == base + BLOCKS * block);

    /* Small requests fill the holes lowest first. */
    uint64_t addr;
    CHECK(gp_alloc_get(a, q, q, &addr) == 0 && addr == addrs[0]);
    CHECK(gp_alloc_get(a, 3 * q, q, &addr) == 0 && addr == addrs[0] + q);
    for (int i = 2; i < BLOCKS; i += 2) {
        CHECK(gp_alloc_get(a, block, q, &addr) == 0);
        CHECK(addr == addrs[i]);
    }
    s = stats_of(a);
    CHECK(s.free_extents == 1); /* only the tail is left */
    CHECK(s.largest_free == size - (BLOCKS + 2) * block);
    gp_alloc_destroy(a);
}

/* Frees BLOCKS adjacent blocks that fill the range exactly, in the given
 * order, checking after every put that the free extents are the maximal runs
 * of freed blocks, i.e. that neighbours were coalesced at once. */
enum { COALESCE_BLOCKS = 5 };

static bool free_in_order_and_check_runs(const int order[COALESCE_BLOCKS])
{
    const uint64_t q = 4096, block = 2 * q, base = 0x40000;
    struct gp_alloc *a;
    REQUIRE(gp_alloc_create(base, COALESCE_BLOCKS * block, q, &a) == 0);
    uint64_t addrs[COALESCE_BLOCKS];
    for (int i = 0; i < COALESCE_BLOCKS; i++)
        REQUIRE(gp_alloc_get(a, block, q, &addrs[i]) == 0);
    REQUIRE(stats_of(a).free_extents == 0 && stats_of(a).largest_free == 0);

    bool is_free[COALESCE_BLOCKS] = {false};
    bool ok = true;
    for (int step = 0; step < COALESCE_BLOCKS && ok; step++) {
        int victim = order[step];
        ok = gp_alloc_put(a, addrs[victim], NULL) == 0;
        is_free[victim] = true;
        uint64_t runs = 0, run = 0, longest = 0;
        for (int i = 0; i < COALESCE_BLOCKS; i++) {
            run = is_free[i] ? run + 1 : 0;
            runs += run == 1;
            longest = run > longest ? run : longest;
        }
        struct gp_alloc_stats s = stats_of(a);
        ok = ok && s.free_extents == runs && s.largest_free == longest * block;
    }
    struct gp_alloc_stats s = stats_of(a);
    gp_alloc_destroy(a);
    REQUIRE(ok);
    REQUIRE(s.free_extents == 1 && s.largest_free == COALESCE_BLOCKS * block);
    REQUIRE(s.count == 0 && s.bytes_in_use == 0);
    return true;
}

static bool next_permutation(int *p, int n)
{
    int i = n - 2;
    while (i >= 0 && p[i] >= p[i + 1])
        i--;
    if (i < 0)
        return false;
    int j = n - 1;
    while (p[j] <= p[i])
        j--;
    int t = p[i];
    p[i] = p[j];
    p[j] = t;
    for (int l = i + 1, r = n - 1; l < r; l++, r--) {
        t = p[l];
        p[l] = p[r];
        p[r] = t;
    }
    return true;
}

static void test_coalescing_all_orders(void)
{
    int order[COALESCE_BLOCKS];
    for (int i = 0; i < COALESCE_BLOCKS; i++)
        order[i] = i;
    int permutations = 0;
    do {
        CHECK(free_in_order_and_check_runs(order));
        permutations++;
    } while (next_permutation(order, COALESCE_BLOCKS));
    CHECK(permutations == 120);
}

static void test_exhaustion(void)
{
    const uint64_t q = 4096, base = 0x1000, size = 16 * q;
    struct gp_alloc *a;
    CHECK(gp_alloc_create(base, size, q, &a) == 0);
    uint64_t addrs[16], addr;
    for (int i = 0; i < 16; i++)
        CHECK(gp_alloc_get(a, q, q, &addrs[i]) == 0);
    struct gp_alloc_stats full = stats_of(a);
    CHECK(full.largest_free == 0 && full.free_extents == 0 && full.bytes_in_use == size);
    CHECK(gp_alloc_get(a, 1, q, &addr) == -ENOMEM);
    CHECK(stats_equal(full, stats_of(a))); /* a failed get changes nothing */

    CHECK(gp_alloc_put(a, addrs[7], NULL) == 0);
    CHECK(gp_alloc_get(a, 2 * q, q, &addr) == -ENOMEM);
    CHECK(gp_alloc_get(a, q, q, &addr) == 0 && addr == addrs[7]);
    CHECK(gp_alloc_get(a, q, q, &addr) == -ENOMEM);
    for (int i = 0; i < 16; i++)
        CHECK(gp_alloc_put(a, addrs[i], NULL) == 0);

    /* Exact fit of the whole range, twice. */
    for (int round = 0; round < 2; round++) {
        CHECK(gp_alloc_get(a, size, q, &addr) == 0 && addr == base);
        CHECK(gp_alloc_get(a, 1, q, &addr) == -ENOMEM);
        CHECK(gp_alloc_put(a, base, NULL) == 0);
    }
    CHECK(gp_alloc_get(a, size + 1, q, &addr) == -ENOMEM);

    /* Free space that only alignment makes unusable: [0x1000, 0x11000) holds
     * one 64 KiB-aligned address, 0x10000, with 4 KiB after it. The subtree
     * bound says 64 KiB are free; the exact aligned check must say no. */
    CHECK(gp_alloc_get(a, 2 * q, 0x10000, &addr) == -ENOMEM);
    CHECK(gp_alloc_get(a, q, 0x10000, &addr) == 0 && addr == 0x10000);
    CHECK(gp_alloc_get(a, 15 * q, q, &addr) == 0 && addr == base);
    CHECK(stats_of(a).free_extents == 0);
    gp_alloc_destroy(a);
}

/* ---- lookup and iteration ---------------------------------------------- */

static void test_find_boundaries(void)
{
    /* base 0: address 0 is a real address, not a sentinel. */
    const uint64_t q = 256, size = 64 * q;
    struct gp_alloc *a;
    CHECK(gp_alloc_create(0, size, q, &a) == 0);
    uint64_t first, second, third;
    CHECK(gp_alloc_get(a, 300, q, &first) == 0 && first == 0); /* placed as 512 */
    CHECK(gp_alloc_get(a, q, q, &second) == 0 && second == 2 * q);
    CHECK(gp_alloc_get(a, q, 8 * q, &third) == 0 && third == 8 * q); /* gap before */

    struct gp_extent e;
    CHECK(gp_alloc_find(a, 0, &e) == 0 && e.addr == 0 && e.size == 2 * q);
    CHECK(gp_alloc_find(a, 299, &e) == 0 && e.addr == 0);
    CHECK(gp_alloc_find(a, 2 * q - 1, &e) == 0 && e.addr == 0); /* last byte placed */
    CHECK(gp_alloc_find(a, 2 * q, &e) == 0 && e.addr == second); /* next one starts */
    CHECK(gp_alloc_find(a, 3 * q - 1, &e) == 0 && e.addr == second);
    CHECK(gp_alloc_find(a, 3 * q, &e) == -ENOENT);     /* one past end: free gap */
    CHECK(gp_alloc_find(a, 8 * q - 1, &e) == -ENOENT);
    CHECK(gp_alloc_find(a, 8 * q + 17, &e) == 0 && e.addr == third);
    CHECK(gp_alloc_find(a, 9 * q, &e) == -ENOENT);
    CHECK(gp_alloc_find(a, size, &e) == -ENOENT);      /* past the range */
    CHECK(gp_alloc_find(a, UINT64_MAX, &e) == -ENOENT);

    CHECK(gp_alloc_put(a, second, NULL) == 0);
    CHECK(gp_alloc_find(a, second, &e) == -ENOENT);    /* freed */
    CHECK(gp_alloc_find(a, 2 * q - 1, &e) == 0 && e.addr == 0);
    gp_alloc_destroy(a);

    /* A range not starting at 0: just below base is outside. */
    CHECK(gp_alloc_create(0x10000, size, q, &a) == 0);
    CHECK(gp_alloc_get(a, q, q, &first) == 0 && first == 0x10000);
    CHECK(gp_alloc_find(a, 0x10000 - 1, &e) == -ENOENT);
    CHECK(gp_alloc_find(a, 0, &e) == -ENOENT);
    gp_alloc_destroy(a);
}

static void test_foreach_order_and_stop(void)
{
    const uint64_t q = 256, base = 0x100000, size = 4096 * q;
    struct gp_alloc *a;
    CHECK(gp_alloc_create(base, size, q, &a) == 0);
    struct gp_extent empty_items[1];
    struct extent_list list = {.items = empty_items, .capacity = 1};
    CHECK(gp_alloc_foreach(a, collect_extent, &list) == 0 && list.count == 0);

    enum { N = 300 };
    uint64_t addrs[N];
    uint64_t rng = 7;
    for (int i = 0; i < N; i++)
        CHECK(gp_alloc_get(a, 1 + rng_below(&rng, 8 * q), q, &addrs[i]) == 0);
    for (int i = 0; i < N; i += 3) /* leave gaps so free extents sit between */
        CHECK(gp_alloc_put(a, addrs[i], NULL) == 0);

    struct gp_extent items[N];
    list = (struct extent_list){.items = items, .capacity = N};
    CHECK(gp_alloc_foreach(a, collect_extent, &list) == 0);
    CHECK(list.count == stats_of(a).count);
    uint64_t bytes = 0;
    for (size_t i = 0; i < list.count; i++) {
        bytes += items[i].size;
        if (i > 0)
            CHECK(items[i - 1].addr + items[i - 1].size <= items[i].addr);
    }
    CHECK(bytes == stats_of(a).bytes_in_use);

    /* Early stop: fn's non-zero value comes back and nothing more is visited. */
    struct gp_extent first3[N];
    list = (struct extent_list){.items = first3, .capacity = N, .stop_after = 3};
    CHECK(gp_alloc_foreach(a, collect_extent, &list) == 42);
    CHECK(list.count == 3 && extents_equal(first3, items, 3));
    gp_alloc_destroy(a);
}

static void test_foreach_in_overlap(void)
{
    const uint64_t q = 256, base = 0x100000;
    struct gp_alloc *a;
    CHECK(gp_alloc_create(base, 1024 * q, q, &a) == 0);
    uint64_t x, y, z;
    CHECK(gp_alloc_get(a, 4 * q, q, &x) == 0);
    CHECK(gp_alloc_get(a, 4 * q, q, &y) == 0);
    CHECK(gp_alloc_get(a, 4 * q, q, &z) == 0);
    CHECK(gp_alloc_put(a, x, NULL) == 0); /* [x, y) is now a free gap */

    struct gp_extent items[4];
    struct extent_list list;
#define COUNT_IN(lo, hi) \
    (list = (struct extent_list){.items = items, .capacity = 4},                               \
     gp_alloc_foreach_in(a, (lo), (hi), collect_extent, &list), list.count)

    CHECK(COUNT_IN(y, y + 4 * q) == 1 && items[0].addr == y);    /* exactly y */
    CHECK(COUNT_IN(y + 4 * q - 1, y + 4 * q) == 1 && items[0].addr == y); /* last byte */
    CHECK(COUNT_IN(y + 4 * q, y + 4 * q + 1) == 1 && items[0].addr == z); /* end excluded */
    CHECK(COUNT_IN(x, y) == 0);                                   /* hi == start excluded */
    CHECK(COUNT_IN(x, y + 1) == 1 && items[0].addr == y);
    CHECK(COUNT_IN(y + 1, z + 1) == 2 && items[0].addr == y && items[1].addr == z);
    CHECK(COUNT_IN(0, UINT64_MAX) == 2);
    CHECK(COUNT_IN(z + 4 * q, UINT64_MAX) == 0);                  /* free tail only */
    CHECK(COUNT_IN(y + q, y + q) == 0);                           /* empty range */
    CHECK(COUNT_IN(z, y) == 0);                                   /* lo > hi */
    CHECK(COUNT_IN(y + q, y + 2 * q) == 1 && items[0].addr == y); /* strictly inside */

    /* Early stop works here too. */
    list = (struct extent_list){.items = items, .capacity = 4, .stop_after = 1};
    CHECK(gp_alloc_foreach_in(a, 0, UINT64_MAX, collect_extent, &list) == 42 && list.count == 1);
#undef COUNT_IN
    gp_alloc_destroy(a);
}

/* ---- randomized comparison against a reference model ------------------- */

/* The reference: live allocations in a sorted array, first fit by scanning
 * the gaps in order. Slow and obviously right, which is the point. */
enum { MODEL_CELLS = 4096 };

struct model {
    uint64_t base, end, quantum;
    struct gp_extent live[MODEL_CELLS]; /* sorted by addr */
    size_t count;
    uint64_t high_water_end;
};

static bool model_try_gap(uint64_t start, uint64_t limit, uint64_t size, uint64_t align,
                          uint64_t *addr)
{
    uint64_t candidate = round_up(start, align);
    if (candidate >= limit || limit - candidate < size)
        return false;
    *addr = candidate;
    return true;
}

/* Returns the index the new allocation goes to, or -1 if nothing fits. */
static long model_first_fit(const struct model *m, uint64_t size, uint64_t align, uint64_t *addr)
{
    uint64_t gap_start = m->base;
    for (size_t i = 0; i < m->count; i++) {
        if (model_try_gap(gap_start, m->live[i].addr, size, align, addr))
            return (long)i;
        gap_start = m->live[i].addr + m->live[i].size;
    }
    return model_try_gap(gap_start, m->end, size, align, addr) ? (long)m->count : -1;
}

static void model_insert(struct model *m, size_t index, uint64_t addr, uint64_t size)
{
    memmove(&m->live[index + 1], &m->live[index], (m->count - index) * sizeof(m->live[0]));
    m->live[index] = (struct gp_extent){addr, size};
    m->count++;
    if (addr + size > m->high_water_end)
        m->high_water_end = addr + size;
}

static void model_remove(struct model *m, size_t index)
{
    memmove(&m->live[index], &m->live[index + 1], (m->count - index - 1) * sizeof(m->live[0]));
    m->count--;
}

/* Index of the live allocation containing addr, or -1. */
static long model_find(const struct model *m, uint64_t addr)
{
    size_t lo = 0, hi = m->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->live[mid].addr + m->live[mid].size <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < m->count && m->live[lo].addr <= addr ? (long)lo : -1;
}

static struct gp_alloc_stats model_stats(const struct model *m)
{
    struct gp_alloc_stats s = {0};
    uint64_t gap_start = m->base;
    for (size_t i = 0; i <= m->count; i++) {
        uint64_t gap_end = i < m->count ? m->live[i].addr : m->end;
        uint64_t gap = gap_end - gap_start;
        s.free_extents += gap > 0;
        s.largest_free = gap > s.largest_free ? gap : s.largest_free;
        if (i < m->count) {
            s.bytes_in_use += m->live[i].size;
            gap_start = m->live[i].addr + m->live[i].size;
        }
    }
    s.count = m->count;
    s.high_water = m->high_water_end - m->base;
    return s;
}

/* Mostly small sizes and alignments, like real CUDA programs, with a tail
 * of large ones so that exhaustion and alignment-only failures happen. */
static uint64_t random_request_size(uint64_t *rng, uint64_t q)
{
    uint64_t pick = rng_below(rng, 100);
    uint64_t max_quanta = pick < 80 ? 4 : pick < 97 ? 32 : 512;
    return 1 + rng_below(rng, max_quanta * q);
}

static uint64_t random_alignment(uint64_t *rng)
{
    return 1ull << (rng_below(rng, 100) < 70 ? rng_below(rng, 9) : rng_below(rng, 15));
}

static bool stress_alloc(struct gp_alloc *a, struct model *m, uint64_t *rng)
{
    uint64_t want = random_request_size(rng, m->quantum);
    uint64_t align = random_alignment(rng);
    uint64_t placed = round_up(want, m->quantum);
    uint64_t effective_align = align > m->quantum ? align : m->quantum;
    uint64_t expected = 0, got = 0;
    long index = model_first_fit(m, placed, effective_align, &expected);
    int rc = gp_alloc_get(a, want, align, &got);
    if (index < 0) {
        REQUIRE(rc == -ENOMEM);
        return true;
    }
    REQUIRE(rc == 0);
    REQUIRE(got == expected);
    model_insert(m, (size_t)index, got, placed);
    return true;
}

static bool stress_free(struct gp_alloc *a, struct model *m, uint64_t *rng)
{
    size_t index = rng_below(rng, m->count);
    struct gp_extent victim = m->live[index];
    if (victim.size > m->quantum) /* an interior pointer never frees */
        REQUIRE(gp_alloc_put(a, victim.addr + m->quantum, NULL) == -ENOENT);
    uint64_t freed = 0;
    REQUIRE(gp_alloc_put(a, victim.addr, &freed) == 0);
    REQUIRE(freed == victim.size);
    REQUIRE(gp_alloc_put(a, victim.addr, NULL) == -ENOENT); /* double free */
    model_remove(m, index);
    return true;
}

static bool stress_find(const struct gp_alloc *a, const struct model *m, uint64_t *rng)
{
    /* Probe a little beyond both ends too. */
    uint64_t span = m->end - m->base + 2 * m->quantum;
    uint64_t probe = m->base - m->quantum + rng_below(rng, span);
    long index = model_find(m, probe);
    struct gp_extent e;
    int rc = gp_alloc_find(a, probe, &e);
    if (index < 0) {
        REQUIRE(rc == -ENOENT);
        return true;
    }
    REQUIRE(rc == 0);
    REQUIRE(e.addr == m->live[index].addr && e.size == m->live[index].size);
    return true;
}

static bool stress_compare_listing(const struct gp_alloc *a, const struct model *m)
{
    static struct gp_extent listed[MODEL_CELLS];
    struct extent_list list = {.items = listed, .capacity = MODEL_CELLS};
    REQUIRE(gp_alloc_foreach(a, collect_extent, &list) == 0);
    REQUIRE(list.count == m->count);
    REQUIRE(extents_equal(listed, m->live, m->count));
    return true;
}

static void test_stress_against_model(void)
{
    static struct model m; /* ~64 KiB: keep it off the stack */
    const uint64_t q = 256;
    memset(&m, 0, sizeof(m));
    m.quantum = q;
    m.base = 0x7f0000000000ull + 5 * q; /* aligned to q only */
    m.end = m.base + MODEL_CELLS * q;
    m.high_water_end = m.base;
    struct gp_alloc *a;
    CHECK(gp_alloc_create(m.base, m.end - m.base, q, &a) == 0);

    uint64_t rng = 0xC0FFEE;
    size_t allocs = 0, enomems = 0;
    for (int op = 0; op < 200000; op++) {
        /* Drift toward ~300 live so the range fragments without staying full. */
        uint64_t alloc_percent = m.count < 300 ? 60 : 40;
        if (m.count == 0 || rng_below(&rng, 100) < alloc_percent) {
            size_t before = m.count;
            CHECK(stress_alloc(a, &m, &rng));
            allocs++;
            enomems += m.count == before;
        } else {
            CHECK(stress_free(a, &m, &rng));
        }
        CHECK(stress_find(a, &m, &rng));
        CHECK(stats_equal(stats_of(a), model_stats(&m)));
        if (op % 97 == 0)
            CHECK(stress_compare_listing(a, &m));
    }
    /* The workload must really have exercised both outcomes. */
    CHECK(allocs > 50000 && enomems > 100);
    while (m.count > 0)
        CHECK(stress_free(a, &m, &rng));
    struct gp_alloc_stats s = stats_of(a);
    CHECK(s.free_extents == 1 && s.largest_free == m.end - m.base);
    gp_alloc_destroy(a);
}

/* ---- threads ----------------------------------------------------------- */

/* Every quantum cell of the range records the tag of the allocation that
 * owns it. A thread claims its cells right after gp_alloc_get and releases
 * them right before gp_alloc_put, both outside the lock, so two live
 * allocations that overlapped would see each other's tag. */
enum { THREADS = 8, OPS_PER_THREAD = 50000, LIVE_PER_THREAD = 64, THREAD_CELLS = 8192 };

struct shared_pool {
    pthread_mutex_t lock;
    struct gp_alloc *alloc;
    uint64_t base, quantum;
    _Atomic uint32_t owner[THREAD_CELLS];
};

struct worker {
    pthread_t thread;
    struct shared_pool *pool;
    uint32_t id;
    /* Failure report: workers must not touch the harness's global. */
    int failed_line;
    const char *failed_expr;
};

#define WORKER_REQUIRE(w, expr)                                                                    \
    do {                                                                                           \
        if (!(expr)) {                                                                             \
            (w)->failed_line = __LINE__;                                                           \
            (w)->failed_expr = #expr;                                                              \
            return false;                                                                          \
        }                                                                                          \
    } while (0)

struct owned {
    uint64_t addr, size;
    uint32_t tag;
};

static uint64_t first_cell(const struct shared_pool *p, const struct owned *o)
{
    return (o->addr - p->base) / p->quantum;
}

static uint64_t end_cell(const struct shared_pool *p, const struct owned *o)
{
    return (o->addr + o->size - p->base) / p->quantum;
}

/* Relaxed is enough: the lock around get/put already orders a cell's release
 * before its next claim; the atomics only make the racy case (an overlap,
 * i.e. the bug being looked for) well-defined and detectable. */
static bool claim_cells(struct worker *w, const struct owned *o)
{
    struct shared_pool *p = w->pool;
    for (uint64_t c = first_cell(p, o); c < end_cell(p, o); c++)
        WORKER_REQUIRE(w, atomic_exchange_explicit(&p->owner[c], o->tag, memory_order_relaxed) == 0);
    return true;
}

static bool release_cells(struct worker *w, const struct owned *o)
{
    struct shared_pool *p = w->pool;
    for (uint64_t c = first_cell(p, o); c < end_cell(p, o); c++)
        WORKER_REQUIRE(w, atomic_exchange_explicit(&p->owner[c], 0, memory_order_relaxed) == o->tag);
    return true;
}

static bool worker_free(struct worker *w, struct owned *o)
{
    WORKER_REQUIRE(w, release_cells(w, o));
    uint64_t freed = 0;
    pthread_mutex_lock(&w->pool->lock);
    int rc = gp_alloc_put(w->pool->alloc, o->addr, &freed);
    pthread_mutex_unlock(&w->pool->lock);
    WORKER_REQUIRE(w, rc == 0 && freed == o->size);
    return true;
}

static bool worker_run(struct worker *w)
{
    struct owned live[LIVE_PER_THREAD];
    size_t count = 0;
    uint64_t rng = 1000 + w->id;
    uint64_t q = w->pool->quantum;
    for (uint32_t op = 0; op < OPS_PER_THREAD; op++) {
        if (count == LIVE_PER_THREAD || (count > 0 && rng_below(&rng, 2))) {
            size_t victim = rng_below(&rng, count);
            WORKER_REQUIRE(w, worker_free(w, &live[victim]));
            live[victim] = live[--count];
            continue;
        }
        uint64_t want = 1 + rng_below(&rng, 8 * q);
        uint64_t align = q << rng_below(&rng, 3);
        uint64_t addr;
        pthread_mutex_lock(&w->pool->lock);
        int rc = gp_alloc_get(w->pool->alloc, want, align, &addr);
        pthread_mutex_unlock(&w->pool->lock);
        if (rc == -ENOMEM)
            continue;
        WORKER_REQUIRE(w, rc == 0);
        live[count] = (struct owned){addr, round_up(want, q), (w->id << 24) | (op + 1)};
        WORKER_REQUIRE(w, claim_cells(w, &live[count]));
        count++;
    }
    while (count > 0)
        WORKER_REQUIRE(w, worker_free(w, &live[--count]));
    return true;
}

static void *worker_main(void *arg)
{
    worker_run(arg);
    return NULL;
}

static void test_threads_no_overlap(void)
{
    static struct shared_pool pool; /* 32 KiB of tags: keep it off the stack */
    const uint64_t q = 4096;
    memset(&pool, 0, sizeof(pool)); /* all-zero is a valid state for atomic_uint32 */
    pool.base = 0x7e0000000000ull;
    pool.quantum = q;
    CHECK(pthread_mutex_init(&pool.lock, NULL) == 0);
    CHECK(gp_alloc_create(pool.base, THREAD_CELLS * q, q, &pool.alloc) == 0);

    struct worker workers[THREADS];
    for (uint32_t i = 0; i < THREADS; i++) {
        workers[i] = (struct worker){.pool = &pool, .id = i + 1};
        CHECK(pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_join(workers[i].thread, NULL) == 0);
    for (int i = 0; i < THREADS; i++) {
        if (workers[i].failed_expr) /* report the worker's own line */
            record_failure(__FILE__, workers[i].failed_line, workers[i].failed_expr);
        CHECK(workers[i].failed_expr == NULL);
    }
    struct gp_alloc_stats s = stats_of(pool.alloc);
    CHECK(s.count == 0 && s.bytes_in_use == 0);
    CHECK(s.free_extents == 1 && s.largest_free == THREAD_CELLS * q);
    CHECK(s.high_water > 0);
    gp_alloc_destroy(pool.alloc);
    pthread_mutex_destroy(&pool.lock);
}

/* ---- performance sanity (prints, never asserts on time) ----------------- */

static void test_perf_100k_live(void)
{
    enum { N = 100000 };
    const uint64_t q = 256, base = 0x7d0000000000ull, size = 1ull << 40;
    struct gp_alloc *a;
    CHECK(gp_alloc_create(base, size, q, &a) == 0);
    uint64_t *addrs = malloc(N * sizeof(*addrs));
    CHECK(addrs != NULL);
    uint64_t rng = 99;

    int failures = 0;
    double t0 = now_ms();
    for (int i = 0; i < N; i++)
        failures += gp_alloc_get(a, 1 + rng_below(&rng, 64 * 1024), q << rng_below(&rng, 4),
                                 &addrs[i]) != 0;
    double t1 = now_ms();
    if (failures) {
        free(addrs);
        CHECK(failures == 0);
    }
    /* Free in random order: most puts then coalesce with a neighbour. */
    for (int i = N - 1; i > 0; i--) {
        size_t j = rng_below(&rng, (uint64_t)i + 1);
        uint64_t t = addrs[i];
        addrs[i] = addrs[j];
        addrs[j] = t;
    }
    double t2 = now_ms();
    for (int i = 0; i < N; i++)
        failures += gp_alloc_put(a, addrs[i], NULL) != 0;
    double t3 = now_ms();
    free(addrs);
    printf("# perf: %d gets in %.1f ms, %d puts (random order) in %.1f ms\n", N, t1 - t0, N,
           t3 - t2);
    CHECK(failures == 0);
    struct gp_alloc_stats s = stats_of(a);
    CHECK(s.count == 0 && s.free_extents == 1 && s.largest_free == size);
    gp_alloc_destroy(a);
}

/* ---- runner ------------------------------------------------------------ */

struct test_case {
    const char *name;
    void (*run)(void);
};

static const struct test_case tests[] = {
    {"create_invalid", test_create_invalid},
    {"get_put_invalid", test_get_put_invalid},
    {"alignment_and_rounding", test_alignment_and_rounding},
    {"first_fit_determinism", test_first_fit_determinism},
    {"fragmentation", test_fragmentation},
    {"coalescing_all_orders", test_coalescing_all_orders},
    {"exhaustion", test_exhaustion},
    {"find_boundaries", test_find_boundaries},
    {"foreach_order_and_stop", test_foreach_order_and_stop},
    {"foreach_in_overlap", test_foreach_in_overlap},
    {"stress_against_model", test_stress_against_model},
    {"threads_no_overlap", test_threads_no_overlap},
    {"perf_100k_live", test_perf_100k_live},
};

int main(void)
{
    int passed = 0, failed = 0;
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
        current_failure = (struct failure){0};
        tests[i].run();
        if (current_failure.failed) {
            printf("FAIL %s: %s:%d: %s\n", tests[i].name, current_failure.file,
                   current_failure.line, current_failure.expr);
            failed++;
        } else {
            printf("ok %s\n", tests[i].name);
            passed++;
        }
        fflush(stdout);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
