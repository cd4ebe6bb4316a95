/* Plain CUDA runtime program: a few cudaMalloc buffers of varied sizes,
 * filled by a kernel, speaking the test protocol (see gputest.h).
 *
 * Built twice by test/gpu/run.sh from this one source:
 *   build/gpu/static_cudart   nvcc's default, cudart linked statically
 *   build/gpu/shared_cudart   -cudart shared (libcudart.so.13)
 * Under the shim, both must land every cudaMalloc in the pool, because cudart
 * reaches the driver through dlopen + cuGetProcAddress either way. */
#include "gputest.h"

int main(void)
{
    gt_prog = "static_cudart";
    /* Sizes: small, odd (tail bytes), just over a 64 MiB boundary, large. */
    static const uint64_t sizes[] = {
        1ull << 20,                /* 1 MiB */
        12345,                     /* odd size: pool sub-allocation, tail bytes */
        (64ull << 20) + 4096,      /* 64 MiB + 4 KiB: spans chunks */
        300ull << 20,              /* 300 MiB */
    };
    enum { N = sizeof sizes / sizeof sizes[0] };
    gt_dev dev;
    gt_buf bufs[N];

    gt_dev_init(&dev, 0);
    for (int i = 0; i < N; i++)
        gt_rt_alloc(&bufs[i], &dev, sizes[i], GT_PATTERN_RANDOM);
    gt_rt_fill_all(bufs, N, &dev, 0);
    gt_rt_checksum_all(bufs, N, &dev);
    gt_emit_ready(bufs, N);

    gt_rt_serve(bufs, N, &dev);

    for (int i = 0; i < N; i++)
        GT_CK(cudaFree((void *)(uintptr_t)bufs[i].addr));
    gt_dev_fini(&dev);
    return 0;
}
