#define _GNU_SOURCE
#include "staging.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include "contexts.h"
#include "gate.h"
#include "log.h"
#include "real_driver.h"

#define TOUCH_THREADS 16
#define PAGE 4096u

struct touch_span {
    volatile uint8_t *p;
    uint64_t n;
};

static void *touch_span(void *arg)
{
    struct touch_span *s = arg;
    for (uint64_t i = 0; i < s->n; i += PAGE)
        s->p[i] = 0;
    return NULL;
}

/* Faults every page in now, outside any application pause, from several
 * threads: one thread zeroing 16 GiB (MAP_POPULATE) takes 6.6 s on the
 * H200 hosts, sixteen take 3 s for a memfd and 0.3 s with huge pages. */
static void fault_in(uint8_t *p, uint64_t size)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int n = cpus < 1 ? 1 : cpus < TOUCH_THREADS ? (int)cpus : TOUCH_THREADS;
    uint64_t per = (size / (uint64_t)n + PAGE - 1) / PAGE * PAGE;
    pthread_t threads[TOUCH_THREADS];
    struct touch_span spans[TOUCH_THREADS];
    int started = 0;
    for (int i = 0; i < n; i++) {
        uint64_t off = (uint64_t)i * per;
        if (off >= size)
            break;
        spans[i] = (struct touch_span){ p + off, size - off < per ? size - off : per };
        if (pthread_create(&threads[i], NULL, touch_span, &spans[i]) != 0)
            touch_span(&spans[i]);
        else
            started |= 1 << i;
    }
    for (int i = 0; i < n; i++)
        if (started & (1 << i))
            pthread_join(threads[i], NULL);
}

static void pin(struct gp_staging *s, int device, uint64_t *register_ns)
{
    uint64_t t0 = gp_now_ns();
    CUresult cu = CUDA_SUCCESS;
    if (!gp_contexts_use_primary(device, &cu))
        cu = GP_REAL(cuMemHostRegister_v2)(s->base, s->size, CU_MEMHOSTREGISTER_PORTABLE);
    s->registered = cu == CUDA_SUCCESS;
    if (!s->registered)
        GP_WARN("staging", "cuMemHostRegister of %llu MiB failed (CUresult %d): copies go through pageable memory",
                (unsigned long long)(s->size >> 20), (int)cu);
    if (register_ns)
        *register_ns = gp_now_ns() - t0;
}

static void unpin(struct gp_staging *s)
{
    if (s->registered)
        GP_REAL(cuMemHostUnregister)(s->base);
    s->registered = false;
}

int gp_staging_create(uint64_t size, bool private_memory, int device, struct gp_staging *out, uint64_t *register_ns)
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
    size = (size + PAGE - 1) / PAGE * PAGE;
    int fd = -1;
    void *p;
    if (private_memory) {
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p != MAP_FAILED)
            madvise(p, size, MADV_HUGEPAGE); /* a hint: without THP it is 4 KiB pages */
    } else {
        fd = memfd_create("gpuckpt-staging", MFD_CLOEXEC);
        if (fd < 0)
            return -errno;
        if (ftruncate(fd, (off_t)size) < 0) {
            int err = -errno;
            close(fd);
            return err;
        }
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    if (p == MAP_FAILED) {
        int err = -errno;
        if (fd >= 0)
            close(fd);
        return err;
    }
    *out = (struct gp_staging){ .fd = fd, .base = p, .size = size };
    fault_in(out->base, size);
    pin(out, device, register_ns);
    return 0;
}

int gp_staging_adopt(const struct gp_held *held, int device, struct gp_staging *out, uint64_t *register_ns)
{
    *out = (struct gp_staging){ .fd = -1 };
    if (!held->base)
        return -ENOENT;
    int fd = -1;
    if (held->fd >= 0 && (fd = fcntl(held->fd, F_DUPFD_CLOEXEC, 0)) < 0)
        return -errno;
    *out = (struct gp_staging){ .fd = fd, .base = held->base, .size = held->size, .borrowed = true };
    pin(out, device, register_ns);
    return 0;
}

void gp_staging_hold(struct gp_staging *s, struct gp_held *held)
{
    gp_held_drop(held);
    if (!s->base)
        return;
    unpin(s);
    *held = (struct gp_held){ .fd = s->fd, .base = s->base, .size = s->size };
    *s = (struct gp_staging){ .fd = -1 };
}

void gp_held_drop(struct gp_held *held)
{
    if (held->base)
        munmap(held->base, held->size);
    if (held->fd >= 0)
        close(held->fd);
    *held = (struct gp_held){ .fd = -1 };
}

void gp_staging_destroy(struct gp_staging *s)
{
    if (!s->base)
        return;
    unpin(s);
    if (!s->borrowed)
        munmap(s->base, s->size);
    if (s->fd >= 0)
        close(s->fd);
    *s = (struct gp_staging){ .fd = -1 };
}
