/* Checkpoints under load: 8 host threads x 4 streams keep allocating,
 * launching kernels on, verifying and freeing scratch buffers, while one
 * persistent buffer per thread holds seeded data.
 *
 * The persistent buffers are written only at start and by `mutate` (on the
 * main thread), so their state is well defined while the workers churn and
 * a rollback can be checked bit for bit. The workers are never paused by the
 * program: a checkpoint has to cope with them (the shim's gate stops and
 * drains their CUDA calls itself).
 *
 * Protocol (gputest.h) plus:
 *   state/mutated replies carry "errors" (scratch verification failures and
 *   failed CUDA calls in workers: must stay 0), "iterations" (worker rounds
 *   so far), "running", and "maxRoundMs" (longest worker round since the
 *   last reply: shows how long the workers were held by a checkpoint);
 *   stop -> workers finish their round, free everything and exit ->
 *   {"event":"stopped",...same members...}. After `stop` the only live
 *   allocations are the persistent buffers (and the checksum accumulator),
 *   as they were before the workers started, so restore --into applies.
 *
 * Usage: threads [NTHREADS=8] */
#include <pthread.h>

#include <atomic>

#include "gputest.h"

enum { MAX_THREADS = 64, NSTREAMS = 4 };
static const uint64_t WIN_BYTES = 256 << 10; /* bytes read back per scratch buffer */
static const uint64_t SCRATCH_SIZES[] = {4096, 192 << 10, (1 << 20) + 512, 6 << 20, 33 << 20};

static std::atomic<bool> stop_flag(false);
static std::atomic<unsigned long long> iterations(0), errors(0), max_round_ns(0);

/* scratch[i] = ~scratch[i] ^ (mask + i): a second kernel on the same stream */
__global__ void scramble_kernel(unsigned long long *p, unsigned long long nwords, unsigned long long mask)
{
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nwords; i += stride)
        p[i] = ~p[i] ^ (mask + i);
}

/* A failed CUDA call in a worker is counted as an error and logged, never fatal. */
#define W_CK(call) w_check((call), #call, __LINE__)
static bool w_check(cudaError_t e, const char *what, int line)
{
    if (e == cudaSuccess)
        return true;
    unsigned long long n = ++errors;
    if (n <= 20)
        gt_log("worker: threads.cu:%d: %s: %s", line, what, cudaGetErrorString(e));
    return false;
}

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

struct worker {
    int id;
    pthread_t thread;
};

static void *worker_main(void *arg)
{
    const int id = ((worker *)arg)->id;
    cudaStream_t st[NSTREAMS];
    uint64_t *host[NSTREAMS];
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(id + 1);

    W_CK(cudaSetDevice(0));
    for (int s = 0; s < NSTREAMS; s++) {
        W_CK(cudaStreamCreateWithFlags(&st[s], cudaStreamNonBlocking));
        W_CK(cudaMallocHost((void **)&host[s], WIN_BYTES));
    }
    for (uint64_t round = 0; !stop_flag.load(); round++) {
        double t0 = gt_now();
        void *d[NSTREAMS] = {};
        uint64_t seed[NSTREAMS], mask[NSTREAMS], off[NSTREAMS], win[NSTREAMS];
        for (int s = 0; s < NSTREAMS; s++) {
            uint64_t size = SCRATCH_SIZES[xorshift(&rng) % (sizeof SCRATCH_SIZES / sizeof SCRATCH_SIZES[0])];
            uint64_t words = size / 8;
            if (!W_CK(cudaMalloc(&d[s], size))) {
                d[s] = NULL;
                continue;
            }
            seed[s] = ((uint64_t)id << 40) ^ (round * NSTREAMS + s);
            mask[s] = xorshift(&rng);
            win[s] = words < WIN_BYTES / 8 ? words : WIN_BYTES / 8;
            off[s] = xorshift(&rng) % (words - win[s] + 1);
            gt_fill_kernel<<<gt_blocks(size), GT_THREADS, 0, st[s]>>>((unsigned long long *)d[s], size, seed[s],
                                                                      GT_PATTERN_RANDOM);
            scramble_kernel<<<gt_blocks(size), GT_THREADS, 0, st[s]>>>((unsigned long long *)d[s], words, mask[s]);
            W_CK(cudaGetLastError());
            W_CK(cudaMemcpyAsync(host[s], (uint64_t *)d[s] + off[s], win[s] * 8, cudaMemcpyDeviceToHost, st[s]));
        }
        for (int s = 0; s < NSTREAMS; s++) {
            if (!d[s])
                continue;
            if (W_CK(cudaStreamSynchronize(st[s]))) {
                uint64_t key = gt_seed_key(seed[s]), bad = 0;
                for (uint64_t j = 0; j < win[s]; j++) {
                    uint64_t i = off[s] + j;
                    uint64_t want = ~gt_word_k(key, seed[s], i, GT_PATTERN_RANDOM) ^ (mask[s] + i);
                    if (host[s][j] != want && bad++ == 0 && errors.load() < 20)
                        gt_log("worker %d stream %d: scratch word %llu: got %016llx want %016llx", id, s,
                               (unsigned long long)i, (unsigned long long)host[s][j], (unsigned long long)want);
                }
                if (bad)
                    errors++;
            }
            W_CK(cudaFree(d[s]));
        }
        iterations++;
        unsigned long long ns = (unsigned long long)((gt_now() - t0) * 1e9), cur = max_round_ns.load();
        while (ns > cur && !max_round_ns.compare_exchange_weak(cur, ns)) {
        }
    }
    for (int s = 0; s < NSTREAMS; s++) {
        W_CK(cudaStreamDestroy(st[s]));
        W_CK(cudaFreeHost(host[s]));
    }
    return NULL;
}

static void emit(const char *event, bool running, const gt_buf *bufs, int n)
{
    char extra[200];
    snprintf(extra, sizeof extra, ",\"errors\":%llu,\"iterations\":%llu,\"running\":%s,\"maxRoundMs\":%.3f",
             errors.load(), iterations.load(), running ? "true" : "false", max_round_ns.exchange(0) / 1e6);
    gt_emit(event, extra, bufs, n);
}

int main(int argc, char **argv)
{
    int nthreads = argc > 1 ? atoi(argv[1]) : 8;
    static worker workers[MAX_THREADS];
    static gt_buf bufs[MAX_THREADS];
    gt_dev dev;
    bool running = false;
    char cmd[256];
    int gen = 0;

    gt_prog = "threads";
    if (nthreads < 1 || nthreads > MAX_THREADS)
        gt_die("thread count must be 1..%d", MAX_THREADS);

    /* Persistent buffers first, on the main thread: deterministic addresses. */
    gt_dev_init(&dev, 0);
    for (int t = 0; t < nthreads; t++)
        gt_rt_alloc(&bufs[t], &dev, (3ull << 20) * (t + 1) + 4096ull * t + (uint64_t)t, GT_PATTERN_RANDOM);
    gt_rt_fill_all(bufs, nthreads, &dev, 0);
    gt_rt_checksum_all(bufs, nthreads, &dev);

    for (int t = 0; t < nthreads; t++) {
        workers[t].id = t;
        if (pthread_create(&workers[t].thread, NULL, worker_main, &workers[t]))
            gt_die("pthread_create failed");
    }
    running = true;
    {
        char extra[160];
        snprintf(extra, sizeof extra, ",\"pid\":%d,\"threads\":%d,\"streamsPerThread\":%d", (int)getpid(), nthreads,
                 NSTREAMS);
        gt_emit("ready", extra, bufs, nthreads);
    }

    while (gt_read_cmd(cmd, sizeof cmd)) {
        if (!strcmp(cmd, "state")) {
            gt_rt_checksum_all(bufs, nthreads, &dev);
            emit("state", running, bufs, nthreads);
        } else if (!strcmp(cmd, "mutate")) {
            gt_rt_fill_all(bufs, nthreads, &dev, ++gen);
            gt_rt_checksum_all(bufs, nthreads, &dev);
            emit("mutated", running, bufs, nthreads);
        } else if (!strcmp(cmd, "stop") || !strcmp(cmd, "quit")) {
            if (running) {
                stop_flag = true;
                for (int t = 0; t < nthreads; t++)
                    pthread_join(workers[t].thread, NULL);
                running = false;
            }
            if (!strcmp(cmd, "quit")) {
                gt_emit("bye", NULL, NULL, 0);
                break;
            }
            gt_rt_checksum_all(bufs, nthreads, &dev);
            emit("stopped", running, bufs, nthreads);
        } else {
            gt_unknown(cmd);
        }
    }
    if (running) { /* stdin ended without quit */
        stop_flag = true;
        for (int t = 0; t < nthreads; t++)
            pthread_join(workers[t].thread, NULL);
    }
    for (int t = 0; t < nthreads; t++)
        GT_CK(cudaFree((void *)(uintptr_t)bufs[t].addr));
    gt_dev_fini(&dev);
    return 0;
}
