/* Unit tests of the host memory kept from one suspend for the next. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"
#include "harness.h"
#include "shim.h"
#include "spare_memory.h"

static struct gp_config config = { .host_retain = GP_DEFAULT_HOST_RETAIN };

const struct gp_config *gp_shim_config(void)
{
    return &config;
}

#define MIB (1ull << 20)

/* Whether the page at p is mapped at all (mincore fails with ENOMEM on a hole). */
static int mapped(void *p)
{
    unsigned char v;
    return mincore(p, 4096, &v) == 0 || errno != ENOMEM;
}

static void test_kept_and_reused(void)
{
    uint64_t got;
    bool fresh;
    char *a = gp_spare_take(8 * MIB, &got, &fresh);
    CHECK(a && got == 8 * MIB && fresh);
    memset(a, 0x5a, got);
    gp_spare_give(a, got);
    CHECK(mapped(a)); /* kept, lazily freed */
    /* A smaller request takes the whole spare. */
    char *b = gp_spare_take(4 * MIB, &got, &fresh);
    CHECK(b == a && got == 8 * MIB && !fresh);
    b[0] = 1; /* still writable */
    gp_spare_give(b, got);
    /* A larger one gets fresh memory; the spare is unmapped first. */
    char *c = gp_spare_take(16 * MIB, &got, &fresh);
    CHECK(c && got == 16 * MIB && fresh);
    CHECK(c[16 * MIB - 1] == 0);
    gp_spare_give(c, got);
    gp_spare_drop();
    CHECK(!mapped(c));
    /* Nothing kept: fresh, zeroed memory. */
    char *d = gp_spare_take(4 * MIB, &got, &fresh);
    CHECK(d && got == 4 * MIB && fresh && d[0] == 0 && d[got - 1] == 0);
    gp_spare_give(d, got);
    gp_spare_drop();
}

static void test_newer_replaces_older(void)
{
    uint64_t g1, g2, got;
    bool fresh;
    char *a = gp_spare_take(4 * MIB, &g1, &fresh);
    char *b = gp_spare_take(4 * MIB, &g2, &fresh); /* no spare yet: a second mapping */
    CHECK(a && b && a != b);
    gp_spare_give(a, g1);
    gp_spare_give(b, g2); /* one spare only: a goes */
    CHECK(!mapped(a));
    CHECK(gp_spare_take(4 * MIB, &got, &fresh) == b && !fresh);
    gp_spare_give(b, got);
    gp_spare_drop();
}

static void test_retain_bound(void)
{
    uint64_t got;
    bool fresh;
    config.host_retain = 4 * MIB;
    char *a = gp_spare_take(8 * MIB, &got, &fresh);
    CHECK(a);
    gp_spare_give(a, got); /* over the bound: unmapped */
    CHECK(!mapped(a));
    char *b = gp_spare_take(4 * MIB, &got, &fresh);
    CHECK(b);
    gp_spare_give(b, got); /* within it: kept */
    CHECK(mapped(b));
    gp_spare_drop();
    config.host_retain = 0;
    char *c = gp_spare_take(MIB, &got, &fresh);
    gp_spare_give(c, got);
    CHECK(!mapped(c));
    config.host_retain = GP_DEFAULT_HOST_RETAIN;
}

static void test_none_kept_after_a_drop(void)
{
    uint64_t got, late_size;
    bool fresh;
    char *late = gp_spare_take(4 * MIB, &late_size, &fresh);
    gp_spare_drop();
    gp_spare_give(late, late_size); /* a release thread, late: not kept */
    CHECK(!mapped(late));
    char *a = gp_spare_take(4 * MIB, &got, &fresh); /* takes keep again */
    CHECK(a);
    gp_spare_give(a, got);
    CHECK(mapped(a));
    CHECK(gp_spare_take(4 * MIB, &got, &fresh) == a && !fresh);
    gp_spare_give(a, got);
    gp_spare_drop();
}

int main(void)
{
    RUN(test_kept_and_reused);
    RUN(test_newer_replaces_older);
    RUN(test_retain_bound);
    RUN(test_none_kept_after_a_drop);
    return HARNESS_END();
}
