#define _GNU_SOURCE
#include "staging.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "contexts.h"
#include "gate.h"
#include "log.h"
#include "real_driver.h"

/* Maps fd (taking it over) and pins it for DMA. */
static int map_and_register(int fd, uint64_t size, int device, struct gp_staging *out, uint64_t *register_ns)
{
    /* MAP_POPULATE: fault the pages in now, outside any application pause. */
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
        int err = -errno;
        close(fd);
        return err;
    }
    *out = (struct gp_staging){ .fd = fd, .base = p, .size = size };
    uint64_t t0 = gp_now_ns();
    CUresult cu = CUDA_SUCCESS;
    if (!gp_contexts_use_primary(device, &cu))
        cu = GP_REAL(cuMemHostRegister_v2)(p, size, CU_MEMHOSTREGISTER_PORTABLE);
    out->registered = cu == CUDA_SUCCESS;
    if (!out->registered)
        GP_WARN("staging", "cuMemHostRegister of %llu MiB failed (CUresult %d): copies go through pageable memory",
                (unsigned long long)(size >> 20), (int)cu);
    if (register_ns)
        *register_ns = gp_now_ns() - t0;
    return 0;
}

int gp_staging_create(uint64_t size, int device, struct gp_staging *out, uint64_t *register_ns)
{
    *out = (struct gp_staging){ .fd = -1 };
    /* Populated and pinned at once inside the application: a request beyond
     * three quarters of the host's memory would get the application killed
     * by the OOM killer, so refuse it. */
    uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    if (!size)
        return -EINVAL;
    if (size > phys / 4 * 3)
        return -ENOMEM;
    int fd = memfd_create("gpuckpt-staging", MFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, (off_t)size) < 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    return map_and_register(fd, size, device, out, register_ns);
}

int gp_staging_adopt(const struct gp_held *held, int device, struct gp_staging *out, uint64_t *register_ns)
{
    *out = (struct gp_staging){ .fd = -1 };
    if (held->fd < 0)
        return -ENOENT;
    int fd = fcntl(held->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    return map_and_register(fd, held->size, device, out, register_ns);
}

void gp_staging_hold(struct gp_staging *s, struct gp_held *held)
{
    gp_held_drop(held);
    if (!s->base)
        return;
    if (s->registered)
        GP_REAL(cuMemHostUnregister)(s->base);
    munmap(s->base, s->size);
    *held = (struct gp_held){ .fd = s->fd, .size = s->size };
    *s = (struct gp_staging){ .fd = -1 };
}

void gp_held_drop(struct gp_held *held)
{
    if (held->fd >= 0)
        close(held->fd);
    *held = (struct gp_held){ .fd = -1 };
}

void gp_staging_destroy(struct gp_staging *s)
{
    if (!s->base)
        return;
    if (s->registered)
        GP_REAL(cuMemHostUnregister)(s->base);
    munmap(s->base, s->size);
    close(s->fd);
    *s = (struct gp_staging){ .fd = -1 };
}
