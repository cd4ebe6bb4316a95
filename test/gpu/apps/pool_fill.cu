/* A large pool for timing checkpoints: GIB GiB (default 16) in four buffers
 * (1/2, 1/4, 1/8, 1/8 of the total) of realistic mixed content: 256 KiB
 * regions cycling through hash bytes (incompressible), zeros, and
 * low-entropy floats (32 distinct values), see GT_PATTERN_MIXED in
 * gputest.h. `mutate` shifts the cycle, so every region changes.
 * Checksums are GPU reductions: a state reply over 16 GiB takes milliseconds.
 * Protocol as in gputest.h; the ready event also carries "totalBytes" and
 * "fillSeconds".
 * Usage: pool_fill [GIB=16]   (fractions allowed, e.g. 0.5) */
#include "gputest.h"

int main(int argc, char **argv)
{
    double gib = argc > 1 ? atof(argv[1]) : 16.0;
    enum { N = 4 };
    static const int share[N] = {2, 4, 8, 8}; /* buffer i holds total/share[i] */
    const uint64_t unit = 2ull << 20;
    gt_dev dev;
    gt_buf bufs[N];
    uint64_t total = 0;

    gt_prog = "pool_fill";
    if (!(gib > 0) || gib > 1024)
        gt_die("usage: pool_fill [GIB]  (0 < GIB <= 1024)");
    gt_dev_init(&dev, 0);
    for (int i = 0; i < N; i++) {
        uint64_t size = (uint64_t)(gib * (double)(1ull << 30) / share[i]) / unit * unit;
        if (size < unit)
            size = unit;
        gt_rt_alloc(&bufs[i], &dev, size, GT_PATTERN_MIXED);
        total += size;
    }
    double t0 = gt_now();
    gt_rt_fill_all(bufs, N, &dev, 0);
    GT_CK(cudaStreamSynchronize(dev.stream));
    double fill_s = gt_now() - t0;
    gt_rt_checksum_all(bufs, N, &dev);

    char extra[160];
    snprintf(extra, sizeof extra, ",\"pid\":%d,\"totalBytes\":%llu,\"fillSeconds\":%.3f", (int)getpid(),
             (unsigned long long)total, fill_s);
    gt_emit("ready", extra, bufs, N);

    gt_rt_serve(bufs, N, &dev);

    for (int i = 0; i < N; i++)
        GT_CK(cudaFree((void *)(uintptr_t)bufs[i].addr));
    gt_dev_fini(&dev);
    return 0;
}
