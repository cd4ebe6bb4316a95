#define _GNU_SOURCE
#include "real_driver.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "driver_mappings.h"
#include "log.h"
#include "test_hooks.h"

void *gp_real[GP_IDX_COUNT];

static const char *const fn_names[GP_IDX_COUNT] = {
#define GP_GATED(name, params, args) #name,
#define GP_ROUTED(name, params, args) #name,
#define GP_UNGATED(name, params, args) #name,
#include "gated_functions.gen.h"
};

/* Wrapper addresses, indexed like gp_real (defined in wrappers.c); NULL for
 * GP_UNGATED entries, which are handed out as they are. */
extern void *const gp_wrappers[GP_IDX_COUNT];

/* Open-addressing map real entry point -> index; written once under
 * pthread_once, read lock-free afterwards. */
#define MAP_SLOTS 2048
static struct { void *real; int idx; } map[MAP_SLOTS];
static pthread_once_t once = PTHREAD_ONCE_INIT;
static void *libcuda;
static atomic_bool loaded;
static atomic_ulong unwrapped;

typedef void *(*dlsym_fn)(void *, const char *);

void *gp_real_dlsym(void *handle, const char *name)
{
    static dlsym_fn real_dlsym;
    if (!real_dlsym) {
        /* dlsym is what we override, so find the next one by version. */
        real_dlsym = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!real_dlsym)
            real_dlsym = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    }
    return real_dlsym ? real_dlsym(handle, name) : NULL;
}

static size_t slot_of(void *p)
{
    uintptr_t x = (uintptr_t)p;
    x ^= x >> 17;
    x *= 0x9E3779B97F4A7C15ull;
    return (size_t)(x >> 53) & (MAP_SLOTS - 1);
}

static void map_insert(void *real, int idx)
{
    for (size_t i = slot_of(real);; i = (i + 1) & (MAP_SLOTS - 1)) {
        if (!map[i].real || map[i].real == real) {
            map[i].real = real;
            map[i].idx = idx;
            return;
        }
    }
}

static void load_once(void)
{
    /* The application may already have it loaded (-lcuda, or cudart's own
     * dlopen): then this only takes a reference. */
    libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!libcuda) {
        GP_DEBUG("driver", "no libcuda.so.1 (%s): inert", dlerror());
        return;
    }
    int resolved = 0;
    for (int i = 0; i < GP_IDX_COUNT; i++) {
        gp_real[i] = gp_real_dlsym(libcuda, fn_names[i]);
        if (gp_real[i]) {
            map_insert(gp_real[i], i);
            resolved++;
        }
    }
    GP_DEBUG("driver", "resolved %d of %d entry points", resolved, GP_IDX_COUNT);
    gp_driver_mappings_know_driver(gp_real[GP_IDX_cuInit]);
    if (gp_test_faults_install)
        gp_test_faults_install();
    atomic_store(&loaded, true);
}

int gp_real_init(void)
{
    pthread_once(&once, load_once);
    return atomic_load(&loaded) ? 0 : -ENOENT;
}

bool gp_real_loaded(void)
{
    return atomic_load(&loaded);
}

void *gp_wrapper_for(void *real_fn)
{
    if (!real_fn || gp_real_init())
        return NULL;
    for (size_t i = slot_of(real_fn);; i = (i + 1) & (MAP_SLOTS - 1)) {
        if (!map[i].real)
            return NULL;
        if (map[i].real == real_fn)
            return gp_wrappers[map[i].idx];
    }
}

unsigned long gp_unwrapped_count(void)
{
    return atomic_load(&unwrapped);
}

void gp_note_unwrapped(const char *symbol)
{
    atomic_fetch_add(&unwrapped, 1);
    GP_DEBUG("driver", "entry point %s handed out ungated (not in the list)", symbol ? symbol : "?");
}
