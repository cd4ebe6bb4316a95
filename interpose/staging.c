#define _GNU_SOURCE
#include "staging.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include "contexts.h"
#include "gate.h"
#include "log.h"
#include "real_driver.h"

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
