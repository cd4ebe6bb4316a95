/* Micro-benchmark of what the shim adds on the hot path. Prints one JSON
 * line and exits (no protocol):
 *   {"event":"bench","mallocFreeNs":M,"launchesPerSec":L,...}
 * mallocFreeNs: median, over REPS repetitions, of the median time of one
 *   cudaMalloc(1 MiB) + cudaFree pair (PAIRS pairs per repetition);
 * launchesPerSec: median over REPS of LAUNCHES empty-kernel launches on one
 *   stream, synchronized at the end, divided by the elapsed time.
 * The runner runs it plain and under `gpuckpt run` and prints the ratios.
 * Usage: bench_alloc [PAIRS=2000] [LAUNCHES=200000] [REPS=5] */
#include <algorithm>
#include <vector>

#include "gputest.h"

__global__ void empty_kernel() {}

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void json_list(char *out, size_t cap, const std::vector<double> &v)
{
    size_t k = 0;
    k += snprintf(out + k, cap - k, "[");
    for (size_t i = 0; i < v.size() && k < cap; i++)
        k += snprintf(out + k, cap - k, "%s%.1f", i ? "," : "", v[i]);
    if (k < cap)
        snprintf(out + k, cap - k, "]");
}

int main(int argc, char **argv)
{
    int pairs = argc > 1 ? atoi(argv[1]) : 2000;
    int launches = argc > 2 ? atoi(argv[2]) : 200000;
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    std::vector<double> malloc_ns, launch_rate, pair_ns((size_t)pairs);
    cudaStream_t st;
    void *p;

    gt_prog = "bench_alloc";
    if (pairs < 1 || launches < 1 || reps < 1)
        gt_die("usage: bench_alloc [PAIRS] [LAUNCHES] [REPS]");
    GT_CK(cudaSetDevice(0));
    GT_CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    /* warm-up: context, module load, first allocations */
    for (int i = 0; i < 100; i++) {
        GT_CK(cudaMalloc(&p, 1 << 20));
        GT_CK(cudaFree(p));
        empty_kernel<<<1, 1, 0, st>>>();
    }
    GT_CK(cudaStreamSynchronize(st));

    for (int r = 0; r < reps; r++) {
        for (int i = 0; i < pairs; i++) {
            double t0 = gt_now();
            GT_CK(cudaMalloc(&p, 1 << 20));
            GT_CK(cudaFree(p));
            pair_ns[(size_t)i] = (gt_now() - t0) * 1e9;
        }
        malloc_ns.push_back(median(pair_ns));

        double t0 = gt_now();
        for (int i = 0; i < launches; i++)
            empty_kernel<<<1, 1, 0, st>>>();
        GT_CK(cudaGetLastError());
        GT_CK(cudaStreamSynchronize(st));
        launch_rate.push_back(launches / (gt_now() - t0));
    }
    GT_CK(cudaStreamDestroy(st));

    char extra[1024], a[400], b[400];
    json_list(a, sizeof a, malloc_ns);
    json_list(b, sizeof b, launch_rate);
    snprintf(extra, sizeof extra,
             ",\"pid\":%d,\"mallocFreeNs\":%.1f,\"launchesPerSec\":%.0f,\"pairs\":%d,\"launches\":%d,\"reps\":%d,"
             "\"mallocFreeNsReps\":%s,\"launchesPerSecReps\":%s",
             (int)getpid(), median(malloc_ns), median(launch_rate), pairs, launches, reps, a, b);
    gt_emit("bench", extra, NULL, 0);
    return 0;
}
