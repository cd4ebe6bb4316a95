/* Buffers on device 0 and device 1 (cudaSetDevice), protocol as in
 * gputest.h. Under the shim device d's allocations lie in its own slice of
 * the pool: [base + d*slice, base + (d+1)*slice).
 * With fewer than 2 devices it prints {"event":"skip","reason":".."} and
 * exits 0. */
#include "gputest.h"

/* device, size: interleaved so the two slices fill in alternating order */
struct planned {
    int device;
    uint64_t size;
};
static const planned plan[] = {
    {0, 8ull << 20},
    {1, (16ull << 20) + 512},
    {0, (100ull << 20) + 4096},
    {1, 64ull << 20},
    {1, 777},
};
enum { N = sizeof plan / sizeof plan[0] };

int main(void)
{
    int count = 0;
    gt_prog = "two_gpu";
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count < 2) {
        char extra[200];
        snprintf(extra, sizeof extra, ",\"reason\":\"%d CUDA device(s) visible%s%s\"", e == cudaSuccess ? count : 0,
                 e == cudaSuccess ? "" : ": ", e == cudaSuccess ? "" : cudaGetErrorName(e));
        gt_emit("skip", extra, NULL, 0);
        return 0;
    }

    gt_dev devs[2];
    gt_buf bufs[N];

    gt_dev_init(&devs[0], 0);
    gt_dev_init(&devs[1], 1);
    for (int i = 0; i < N; i++)
        gt_rt_alloc(&bufs[i], &devs[plan[i].device], plan[i].size, GT_PATTERN_RANDOM);
    gt_rt_fill_all(bufs, N, devs, 0);
    gt_rt_checksum_all(bufs, N, devs);
    gt_emit_ready(bufs, N);

    gt_rt_serve(bufs, N, devs);

    for (int i = 0; i < N; i++) {
        GT_CK(cudaSetDevice(bufs[i].device));
        GT_CK(cudaFree((void *)(uintptr_t)bufs[i].addr));
    }
    gt_dev_fini(&devs[1]);
    gt_dev_fini(&devs[0]);
    return 0;
}
