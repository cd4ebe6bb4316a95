/* Staging let go on a thread of its own (shim/control/staging.c), against
 * the fake libcuda: a departed controller's pinned memfds are unpinned and
 * unmapped by gp_staging_release_later without the caller waiting, and
 * gp_staging_releases_wait returns only once that is done, as a suspend
 * needs before the driver or CRIU saves the process. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fake_driver.h"
#include "harness.h"
#include "staging.h"

void *gp_real[GP_IDX_COUNT];

/* The shim's settings as the environment gives them (gp_config_load). */
static struct gp_config config;

const struct gp_config *gp_shim_config(void)
{
    return &config;
}

typedef CUresult (*pfn_unregister)(void *);

#define MIB (1ull << 20)

/* Whether the page at p is still the staging's (a mapping of its memfd):
 * the range a release frees may be mapped again at once, by the stack of
 * the next release's thread for one. */
static int mapped(void *p)
{
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[512];
    int found = 0;
    while (maps && !found && fgets(line, sizeof line, maps)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (unsigned long)p >= lo && (unsigned long)p < hi)
            found = strstr(line, "gpuckpt-staging") != NULL;
    }
    if (maps)
        fclose(maps);
    return found;
}

static void test_released_later_and_waited_for(void)
{
    struct gp_staging s;
    CHECK(gp_staging_create(64 * MIB, false, 0, &s) == 0);
    gp_staging_wait_all(&s); /* every piece pinned */
    uint8_t *base = s.base;
    uint64_t size = s.size;
    memset(base, 0x5a, size);
    CHECK(mapped(base) && mapped(base + size - 4096));
    struct gp_held none = { 0 };
    gp_staging_release_later(&s, &none);
    CHECK(s.base == NULL && s.size == 0); /* the job owns it now */
    gp_staging_releases_wait();
    CHECK(!mapped(base) && !mapped(base + size - 4096));
    /* Unpinned: the fake no longer knows the first piece. */
    CHECK(((pfn_unregister)fn("cuMemHostUnregister"))(base) == CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
}

static void test_nothing_to_release(void)
{
    struct gp_staging s = { 0 };
    struct gp_held none = { 0 };
    gp_staging_release_later(&s, &none);
    gp_staging_releases_wait(); /* returns: nothing runs */
    CHECK(s.base == NULL);
}

static void test_several_released_at_once(void)
{
    enum { N = 4 };
    struct gp_staging s[N];
    uint8_t *bases[N];
    for (int i = 0; i < N; i++) {
        CHECK(gp_staging_create(16 * MIB, false, 0, &s[i]) == 0);
        gp_staging_wait_all(&s[i]);
        bases[i] = s[i].base;
    }
    for (int i = 0; i < N; i++) {
        struct gp_held none = { 0 };
        gp_staging_release_later(&s[i], &none);
    }
    gp_staging_releases_wait();
    for (int i = 0; i < N; i++)
        CHECK(!mapped(bases[i]));
}

int main(void)
{
    if (gp_config_load(&config)) {
        fprintf(stderr, "test_staging: no configuration\n");
        exit(2);
    }
    gp_real[GP_IDX_cuMemHostRegister_v2] = fn("cuMemHostRegister_v2");
    gp_real[GP_IDX_cuMemHostUnregister] = fn("cuMemHostUnregister");
    CUresult cu;
    if (((pfn_init)fn("cuInit"))(0) || gp_contexts_use_primary(0, &cu)) {
        fprintf(stderr, "test_staging: the fake driver did not start\n");
        exit(2);
    }
    RUN(test_released_later_and_waited_for);
    RUN(test_nothing_to_release);
    RUN(test_several_released_at_once);
    return HARNESS_END();
}
