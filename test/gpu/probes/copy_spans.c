// How fast a pool with its all-zero blocks left out leaves the GPU: many
// short spans (512 KiB of data between 256 KiB of zeros, the benchmark's
// pool_fill) copied device to host into a pinned 256 MiB ring, against the
// same bytes as whole 8 MiB copies. Ways of issuing them: one stream, several
// streams (one per ring slot, round robin), cuMemcpyBatchAsync per slot, and
// several issuing threads with a stream each. The ring is overwritten (only
// the DMA is timed: the bounce ring's workers copy out of it meanwhile).
//   nvcc -O2 -o /tmp/copy_spans test/gpu/probes/copy_spans.c -lcuda -lpthread && /tmp/copy_spans [GIB]
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define CK(x) do { CUresult r_ = (x); if (r_) { printf("FAIL %s = %d (line %d)\n", #x, r_, __LINE__); exit(1); } } while (0)
#define SLOT (8ull << 20)
#define RING_SLOTS 32
#define MAX_STREAMS 8

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

static CUcontext ctx;
static CUdeviceptr dev;
static uint8_t *ring;
static size_t pool, span, stride, nspans;
static CUstream streams[MAX_STREAMS];

/* Spans packed into slots of up to SLOT bytes (whole spans: span divides SLOT). */
static size_t per_slot(void) { return SLOT / span; }

static double one_way(int nstreams, int batch, double *issue)
{
    size_t k = per_slot();
    CUdeviceptr dsts[64], srcs[64];
    size_t sizes[64], idx = 0;
    CUmemcpyAttributes attr = { .srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM };
    CK(cuCtxSynchronize());
    double t0 = now();
    for (size_t first = 0, slot = 0; first < nspans; first += k, slot++) {
        CUstream s = streams[slot % nstreams];
        uint8_t *host = ring + (slot % RING_SLOTS) * SLOT;
        size_t n = nspans - first < k ? nspans - first : k;
        if (batch) {
            for (size_t j = 0; j < n; j++) {
                dsts[j] = (CUdeviceptr)(host + j * span);
                srcs[j] = dev + (first + j) * stride;
                sizes[j] = span;
            }
            CK(cuMemcpyBatchAsync(dsts, srcs, sizes, n, &attr, &idx, 1, s));
        } else {
            for (size_t j = 0; j < n; j++)
                CK(cuMemcpyDtoHAsync(host + j * span, dev + (first + j) * stride, span, s));
        }
    }
    *issue = now() - t0;
    CK(cuCtxSynchronize());
    return now() - t0;
}

struct thread_arg { int id, nthreads; };
static void *issue_thread(void *p)
{
    struct thread_arg *a = p;
    CK(cuCtxSetCurrent(ctx));
    size_t k = per_slot();
    for (size_t first = (size_t)a->id * k, slot = a->id; first < nspans; first += k * a->nthreads, slot += a->nthreads) {
        uint8_t *host = ring + (slot % RING_SLOTS) * SLOT;
        size_t n = nspans - first < k ? nspans - first : k;
        for (size_t j = 0; j < n; j++)
            CK(cuMemcpyDtoHAsync(host + j * span, dev + (first + j) * stride, span, streams[a->id]));
    }
    return NULL;
}

static double threads_way(int nthreads)
{
    pthread_t t[MAX_STREAMS];
    struct thread_arg a[MAX_STREAMS];
    CK(cuCtxSynchronize());
    double t0 = now();
    for (int i = 0; i < nthreads; i++) {
        a[i] = (struct thread_arg){ i, nthreads };
        pthread_create(&t[i], NULL, issue_thread, &a[i]);
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(t[i], NULL);
    CK(cuCtxSynchronize());
    return now() - t0;
}

static void report(const char *what, double s, double issue)
{
    double gb = (double)nspans * span / 1e9;
    printf("%-44s %6.3f s  %5.1f GB/s  issue %.3f s  (%zu copies of %zu KiB)\n", what, s, gb / s, issue, nspans, span >> 10);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    size_t gib = argc > 1 ? strtoull(argv[1], NULL, 10) : 16;
    pool = gib << 30;
    CUdevice d;
    CK(cuInit(0));
    CK(cuDeviceGet(&d, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, d));
    CK(cuCtxSetCurrent(ctx));
    CK(cuMemAlloc(&dev, pool));
    CK(cuMemsetD8(dev, 7, pool));
    ring = mmap(NULL, RING_SLOTS * SLOT, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    CK(cuMemHostRegister(ring, RING_SLOTS * SLOT, CU_MEMHOSTREGISTER_PORTABLE));
    for (int i = 0; i < MAX_STREAMS; i++)
        CK(cuStreamCreate(&streams[i], CU_STREAM_NON_BLOCKING));
    for (int round = 0; round < 2; round++) {
        printf("-- round %d\n", round);
        double issue, s;
        span = SLOT, stride = SLOT, nspans = pool / stride;
        s = one_way(1, 0, &issue), report("whole 8 MiB, 1 stream", s, issue);
        span = 512 << 10, stride = 768 << 10, nspans = pool / stride;
        for (int n = 1; n <= MAX_STREAMS; n *= 2) {
            char what[64];
            snprintf(what, sizeof what, "512 KiB spans, %d stream(s)", n);
            s = one_way(n, 0, &issue), report(what, s, issue);
            snprintf(what, sizeof what, "512 KiB spans, batch per slot, %d stream(s)", n);
            s = one_way(n, 1, &issue), report(what, s, issue);
        }
        for (int n = 2; n <= 4; n *= 2) {
            char what[64];
            snprintf(what, sizeof what, "512 KiB spans, %d threads, a stream each", n);
            s = threads_way(n), report(what, s, 0);
        }
        span = 256 << 10, stride = 512 << 10, nspans = pool / stride;
        s = one_way(1, 0, &issue), report("256 KiB spans, 1 stream", s, issue);
        s = one_way(4, 0, &issue), report("256 KiB spans, 4 streams", s, issue);
        s = one_way(4, 1, &issue), report("256 KiB spans, batch per slot, 4 streams", s, issue);
    }
    return 0;
}
