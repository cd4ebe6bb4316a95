#define _GNU_SOURCE
#include "real_nccl.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <string.h>

#include "../interpose/log.h"
#include "../interpose/real_driver.h"

static __thread int inside;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *libnccl;

static int find_nccl(struct dl_phdr_info *info, size_t size, void *data)
{
    const char *path = info->dlpi_name;
    const char *base = path ? strrchr(path, '/') : NULL;
    base = base ? base + 1 : path;
    if (!base || strncmp(base, "libnccl.so", 10) != 0)
        return 0;
    *(void **)data = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
    return *(void **)data != NULL;
}

void *gp_nccl_real(const char *name)
{
    pthread_mutex_lock(&lock);
    if (!libnccl) {
        dl_iterate_phdr(find_nccl, &libnccl);
        if (!libnccl)
            GP_WARN("nccl", "%s called, but no libnccl.so is loaded", name);
    }
    void *fn = libnccl ? gp_real_dlsym(libnccl, name) : NULL;
    pthread_mutex_unlock(&lock);
    return fn;
}

bool gp_nccl_inside(void)
{
    return inside > 0;
}

void gp_nccl_enter_real(void)
{
    inside++;
}

void gp_nccl_leave_real(void)
{
    inside--;
}
