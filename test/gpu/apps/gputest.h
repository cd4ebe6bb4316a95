/* Shared code of the GPU test programs (test/gpu/apps/).
 *
 * Every program speaks the same line protocol with the test runner
 * (test/gpu/run.mjs): one command per line on stdin, exactly one JSON line per
 * command on stdout, diagnostics on stderr only.
 *
 *   at start  -> {"event":"ready","pid":N,"buffers":[{"device":D,"addr":"0x..","size":N,"checksum":"<16 hex>"},..]}
 *   state     -> {"event":"state","buffers":[..current checksums..]}
 *   mutate    -> every buffer rewritten with a new seed -> {"event":"mutated","buffers":[..]}
 *   touch P   -> the first P percent of every buffer rewritten -> {"event":"touched","buffers":[..]}
 *   quit [N]  -> {"event":"bye"}, exit N (default 0)
 *   anything else -> {"event":"error","message":"unknown command .."}
 * A fatal CUDA error prints {"event":"error","message":".."} and exits 1.
 *
 * Data is deterministic: word i of a buffer filled with seed s is
 * gt_word(s, i, pattern), so two runs give the same checksums.
 *
 * The checksum of a buffer of n bytes, seen as words w[0..] (the last one
 * zero-padded when n is not a multiple of 8), is
 *     sum_i mix64(w[i] ^ (i * K)) + mix64(n)        (mod 2^64)
 * mix64 is a bijection, so any change confined to one word always changes
 * the sum, and independent changes cancel with probability ~2^-64. Addition
 * commutes, so the GPU reduction is deterministic whatever the block order.
 *
 * One header for three kinds of users:
 *   - CUDA runtime programs (.cu): everything below;
 *   - driver_kernels.cu (built with -fatbin, GT_KERNELS_ONLY): the kernels;
 *   - driver_api.c (plain C, no cudart): the host protocol part only.
 */
#ifndef GPUTEST_H
#define GPUTEST_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef __CUDACC__
#define GT_HD __host__ __device__ __forceinline__
#else
#define GT_HD static inline
#endif

#ifdef __cplusplus
#define GT_EXTERN_C extern "C"
#else
#define GT_EXTERN_C
#endif

/* ---------------------------------------------------------------- data -- */

enum {
    GT_PATTERN_RANDOM = 0, /* every word a hash of (seed, index) */
    GT_PATTERN_MIXED = 1,  /* regions of hash bytes, zeros, low-entropy floats */
};
/* Mixed pattern: 256 KiB regions cycle through the three kinds; the kind of
 * region r under seed s is (r + s) % 3, so a new seed changes every region. */
#define GT_REGION_WORDS (32768ull)

GT_HD uint64_t gt_mix64(uint64_t k)
{
    /* MurmurHash3 fmix64: a bijection on 64-bit words. */
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return k;
}

GT_HD uint64_t gt_seed_key(uint64_t seed) { return gt_mix64(seed + 0x632be59bd9b4e019ull); }

GT_HD uint32_t gt_float_bits(float f)
{
    union {
        float f;
        uint32_t u;
    } v;
    v.f = f;
    return v.u;
}

/* Word i of a buffer filled with `seed`; key = gt_seed_key(seed). */
GT_HD uint64_t gt_word_k(uint64_t key, uint64_t seed, uint64_t i, int pattern)
{
    uint64_t h = gt_mix64(i * 0x9e3779b97f4a7c15ull ^ key);
    if (pattern == GT_PATTERN_RANDOM)
        return h;
    switch ((i / GT_REGION_WORDS + seed) % 3) {
    case 0:
        return h;
    case 1:
        return 0;
    default: {
        /* Two floats from 32 values in [-0.5, 0.5): like quantized weights. */
        float a = (float)((int)(h & 31) - 16) * 0.03125f;
        float b = (float)((int)((h >> 8) & 31) - 16) * 0.03125f;
        return ((uint64_t)gt_float_bits(b) << 32) | gt_float_bits(a);
    }
    }
}

GT_HD uint64_t gt_word(uint64_t seed, uint64_t i, int pattern)
{
    return gt_word_k(gt_seed_key(seed), seed, i, pattern);
}

/* Checksum term of word i. */
GT_HD uint64_t gt_sum_term(uint64_t w, uint64_t i) { return gt_mix64(w ^ (i * 0xd6e8feb86659fd93ull)); }

/* ------------------------------------------------------------- kernels -- */

#define GT_THREADS 256
#define GT_MAX_BLOCKS 4096u

#ifdef __CUDACC__
/* Fill n bytes at p (8-byte aligned) with the pattern of `seed`. Tail bytes
 * (n % 8) are the low bytes of word n/8. */
GT_EXTERN_C __global__ void gt_fill_kernel(unsigned long long *p, unsigned long long nbytes,
                                           unsigned long long seed, int pattern)
{
    uint64_t nwords = nbytes / 8, key = gt_seed_key(seed);
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nwords; i += stride)
        p[i] = gt_word_k(key, seed, i, pattern);
    if (blockIdx.x == 0 && threadIdx.x == 0 && (nbytes & 7)) {
        uint64_t w = gt_word_k(key, seed, nwords, pattern);
        unsigned char *t = (unsigned char *)(p + nwords);
        for (unsigned j = 0; j < (unsigned)(nbytes & 7); j++)
            t[j] = (unsigned char)(w >> (8 * j));
    }
}

/* *out += sum of the checksum terms of the n bytes at p (mix64(n) is added
 * on the host). *out must be zeroed first. */
GT_EXTERN_C __global__ void gt_checksum_kernel(const unsigned long long *p, unsigned long long nbytes,
                                               unsigned long long *out)
{
    uint64_t nwords = nbytes / 8, s = 0;
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nwords; i += stride)
        s += gt_sum_term(p[i], i);
    if (blockIdx.x == 0 && threadIdx.x == 0 && (nbytes & 7)) {
        const unsigned char *t = (const unsigned char *)(p + nwords);
        uint64_t w = 0;
        for (unsigned j = 0; j < (unsigned)(nbytes & 7); j++)
            w |= (uint64_t)t[j] << (8 * j);
        s += gt_sum_term(w, nwords);
    }
    /* warp, then block reduction; one atomic per block */
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_down_sync(0xffffffffu, s, o);
    __shared__ unsigned long long warp_sums[32];
    unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0)
        warp_sums[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = lane < (blockDim.x + 31) / 32 ? warp_sums[lane] : 0;
        for (int o = 16; o > 0; o >>= 1)
            s += __shfl_down_sync(0xffffffffu, s, o);
        if (lane == 0)
            atomicAdd(out, (unsigned long long)s);
    }
}
/* Word i of a rewriter region holding tag k: the tag itself first, so a
 * region says which write it holds, then incompressible words. */
GT_HD uint64_t gt_tag_word(uint64_t k, uint64_t i)
{
    return i ? gt_mix64(k * 0x9e3779b97f4a7c15ull ^ (i + 0x5bd1e995ull)) : k;
}

GT_EXTERN_C __global__ void gt_tag_kernel(unsigned long long *p, unsigned long long words, unsigned long long k)
{
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride)
        p[i] = gt_tag_word(k, i);
}

/* One CTA per region (addr, words pairs in regions): out[r] = the tag region
 * r holds, or ~0 when any of its words is not that tag's (a torn region). */
GT_EXTERN_C __global__ void gt_tag_check_kernel(const unsigned long long *regions, unsigned long long *out)
{
    const unsigned long long *p = (const unsigned long long *)(uintptr_t)regions[2 * blockIdx.x];
    uint64_t words = regions[2 * blockIdx.x + 1], k = p[0];
    int ok = 1;
    for (uint64_t i = threadIdx.x; i < words; i += blockDim.x)
        ok &= p[i] == gt_tag_word(k, i);
    ok = __syncthreads_and(ok);
    if (threadIdx.x == 0)
        out[blockIdx.x] = ok ? k : ~0ull;
}
#endif /* __CUDACC__ */

/* Grid size for n bytes: enough blocks to cover the words, at most GT_MAX_BLOCKS. */
static inline unsigned gt_blocks(uint64_t nbytes)
{
    uint64_t b = (nbytes / 8 + GT_THREADS - 1) / GT_THREADS;
    if (b < 1)
        b = 1;
    return b > GT_MAX_BLOCKS ? GT_MAX_BLOCKS : (unsigned)b;
}

#ifndef GT_KERNELS_ONLY

/* ------------------------------------------------------------ protocol -- */

typedef struct gt_buf {
    int device;
    uint64_t addr; /* device pointer */
    uint64_t size; /* bytes */
    uint64_t sum;  /* last computed checksum */
    int pattern;
} gt_buf;

static const char *gt_prog = "gputest";

static inline double gt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Writes s as a JSON string body (no quotes) to f. */
static inline void gt_json_str(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
}

/* One protocol line: {"event":EVENT<extra>,"buffers":[..]} where extra is
 * preformatted JSON members starting with ',' (or NULL). bufs may be NULL. */
static inline void gt_emit(const char *event, const char *extra, const gt_buf *bufs, int n)
{
    printf("{\"event\":\"%s\"%s", event, extra ? extra : "");
    if (bufs) {
        printf(",\"buffers\":[");
        for (int i = 0; i < n; i++)
            printf("%s{\"device\":%d,\"addr\":\"0x%llx\",\"size\":%llu,\"checksum\":\"%016llx\"}", i ? "," : "",
                   bufs[i].device, (unsigned long long)bufs[i].addr, (unsigned long long)bufs[i].size,
                   (unsigned long long)bufs[i].sum);
        printf("]");
    }
    printf("}\n");
    fflush(stdout);
}

/* Reply with a protocol error (one line) and keep going. */
static inline void gt_emit_error(const char *msg)
{
    printf("{\"event\":\"error\",\"message\":\"");
    gt_json_str(stdout, msg);
    printf("\"}\n");
    fflush(stdout);
}

/* Fatal: message on stderr and as an error event, exit 1. */
static inline void gt_die(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s\n", gt_prog, msg);
    gt_emit_error(msg);
    exit(1);
}

static inline void gt_log(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", gt_prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* Next command (trimmed) into buf; 0 at end of input. */
static inline int gt_read_cmd(char *buf, size_t cap)
{
    for (;;) {
        if (!fgets(buf, (int)cap, stdin))
            return 0;
        char *s = buf, *e;
        while (*s == ' ' || *s == '\t')
            s++;
        e = s + strlen(s);
        while (e > s && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t'))
            *--e = 0;
        if (!*s)
            continue; /* blank line: no command, no reply */
        memmove(buf, s, (size_t)(e - s) + 1);
        return 1;
    }
}

static inline void gt_unknown(const char *cmd)
{
    char msg[300];
    snprintf(msg, sizeof msg, "unknown command '%.200s'", cmd);
    gt_emit_error(msg);
}

/* Seed of the n-th fill generation of buffer b (generation 0 at start). */
static inline uint64_t gt_seed(int b, int generation) { return 1000003ull * (uint64_t)(b + 1) + 7919ull * (uint64_t)generation; }

/* ------------------------------------------------------ runtime helpers -- */
#if defined(__CUDACC__) && !defined(GT_NO_CUDART)

#define GT_CK(call) gt_check_rt((call), #call, __FILE__, __LINE__)
static inline void gt_check_rt(cudaError_t e, const char *what, const char *file, int line)
{
    if (e != cudaSuccess)
        gt_die("%s:%d: %s: %s (%s)", file, line, what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* Launch the fill of b with seed on stream s (asynchronous). */
static inline void gt_rt_fill(const gt_buf *b, uint64_t seed, cudaStream_t s)
{
    gt_fill_kernel<<<gt_blocks(b->size), GT_THREADS, 0, s>>>((unsigned long long *)(uintptr_t)b->addr, b->size, seed,
                                                             b->pattern);
    GT_CK(cudaGetLastError());
}

/* Checksum of the device bytes of b, computed on the GPU with the
 * accumulator acc (8 bytes of device memory on b's device); synchronizes s. */
static inline uint64_t gt_rt_checksum(const gt_buf *b, unsigned long long *acc, cudaStream_t s)
{
    unsigned long long h = 0;
    GT_CK(cudaMemsetAsync(acc, 0, sizeof *acc, s));
    gt_checksum_kernel<<<gt_blocks(b->size), GT_THREADS, 0, s>>>((const unsigned long long *)(uintptr_t)b->addr,
                                                                 b->size, acc);
    GT_CK(cudaGetLastError());
    GT_CK(cudaMemcpyAsync(&h, acc, sizeof h, cudaMemcpyDeviceToHost, s));
    GT_CK(cudaStreamSynchronize(s));
    return h + gt_mix64(b->size);
}

/* Per-device helper state of the runtime programs: a stream and the
 * checksum accumulator (allocated once, so the set of live allocations is
 * the same at checkpoint and restore). */
typedef struct gt_dev {
    int device;
    cudaStream_t stream;
    unsigned long long *acc;
} gt_dev;

static inline void gt_dev_init(gt_dev *d, int device)
{
    d->device = device;
    GT_CK(cudaSetDevice(device));
    GT_CK(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking));
    GT_CK(cudaMalloc((void **)&d->acc, sizeof *d->acc));
}

static inline void gt_dev_fini(gt_dev *d)
{
    GT_CK(cudaSetDevice(d->device));
    GT_CK(cudaFree(d->acc));
    GT_CK(cudaStreamDestroy(d->stream));
}

/* cudaMalloc a buffer of `size` bytes on device dev. */
static inline void gt_rt_alloc(gt_buf *b, const gt_dev *dev, uint64_t size, int pattern)
{
    void *p = NULL;
    GT_CK(cudaSetDevice(dev->device));
    GT_CK(cudaMalloc(&p, size));
    b->device = dev->device;
    b->addr = (uint64_t)(uintptr_t)p;
    b->size = size;
    b->sum = 0;
    b->pattern = pattern;
}

/* Fill every buffer of generation `gen`, then recompute all checksums. devs
 * is indexed by device ordinal. */
static inline void gt_rt_fill_all(gt_buf *bufs, int n, const gt_dev *devs, int gen)
{
    for (int i = 0; i < n; i++) {
        GT_CK(cudaSetDevice(bufs[i].device));
        gt_rt_fill(&bufs[i], gt_seed(i, gen), devs[bufs[i].device].stream);
    }
}

static inline void gt_rt_checksum_all(gt_buf *bufs, int n, const gt_dev *devs)
{
    for (int i = 0; i < n; i++) {
        const gt_dev *d = &devs[bufs[i].device];
        GT_CK(cudaSetDevice(d->device));
        bufs[i].sum = gt_rt_checksum(&bufs[i], d->acc, d->stream);
    }
}

/* ---- rewriter: the job a live checkpoint copies under ------------------
 * `rewrite MIBPS`: the buffers on the first buffer's device, cut in regions
 * of GT_REWRITE_REGION, each first written with tag r+1; then a thread
 * rewrites MIBPS MiB/s, region after region in turn, with tags n+1, n+2...
 * (one launch per region: a pause finds every region whole). `rewritten`
 * stops it and checks what the regions hold: each one tag, whole, and
 * together the state after some number M of writes: region r holds the
 * last tag <= M of its turn. A checkpoint taken while it ran, restored, must
 * give exactly such a state. */
#include <pthread.h>
#define GT_REWRITE_REGION (8ull << 20)

static struct {
    int on, device, n;
    double mibps;
    unsigned long long *regions; /* host: addr, words per region */
    unsigned long long *table;   /* device copy of regions */
    unsigned long long *out;     /* device: the tag each region holds */
    pthread_t thread;
    int stop;
    long long last; /* last tag written and synchronised */
} gt_rw;

static inline void gt_tag(long long k, cudaStream_t s)
{
    int r = (int)((k - 1) % gt_rw.n);
    gt_tag_kernel<<<gt_blocks(gt_rw.regions[2 * r + 1] * 8), GT_THREADS, 0, s>>>(
        (unsigned long long *)(uintptr_t)gt_rw.regions[2 * r], gt_rw.regions[2 * r + 1], (unsigned long long)k);
    GT_CK(cudaGetLastError());
}

static inline void *gt_rewriter(void *arg)
{
    (void)arg;
    cudaStream_t s;
    GT_CK(cudaSetDevice(gt_rw.device));
    GT_CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    double budget = 0, t = gt_now();
    long long k = gt_rw.n;
    while (!__atomic_load_n(&gt_rw.stop, __ATOMIC_ACQUIRE)) {
        usleep(10000);
        double now = gt_now();
        budget += (now - t) * gt_rw.mibps * (double)(1 << 20);
        t = now;
        for (; budget >= (double)GT_REWRITE_REGION; budget -= (double)GT_REWRITE_REGION)
            gt_tag(++k, s);
        GT_CK(cudaStreamSynchronize(s));
        __atomic_store_n(&gt_rw.last, k, __ATOMIC_RELEASE);
    }
    GT_CK(cudaStreamDestroy(s));
    return NULL;
}

static inline void gt_rewrite_start(const gt_buf *bufs, int n, const gt_dev *devs, double mibps)
{
    if (gt_rw.on || !(mibps > 0)) {
        gt_emit_error(gt_rw.on ? "already rewriting" : "usage: rewrite MIBPS");
        return;
    }
    const gt_dev *d = &devs[bufs[0].device];
    if (!gt_rw.regions) { /* once: the table stays allocated, so the pool's layout stays put */
        int count = 0;
        for (int i = 0; i < n; i++)
            if (bufs[i].device == bufs[0].device)
                count += (int)((bufs[i].size / 8 + GT_REWRITE_REGION / 8 - 1) / (GT_REWRITE_REGION / 8));
        gt_rw.regions = (unsigned long long *)calloc(2 * (size_t)count, sizeof(unsigned long long));
        for (int i = 0, r = 0; i < n; i++) {
            if (bufs[i].device != bufs[0].device)
                continue;
            for (uint64_t off = 0; off + 8 <= bufs[i].size; off += GT_REWRITE_REGION, r++) {
                uint64_t len = bufs[i].size - off < GT_REWRITE_REGION ? bufs[i].size - off : GT_REWRITE_REGION;
                gt_rw.regions[2 * r] = bufs[i].addr + off;
                gt_rw.regions[2 * r + 1] = len / 8;
                gt_rw.n = r + 1;
            }
        }
        GT_CK(cudaSetDevice(d->device));
        GT_CK(cudaMalloc((void **)&gt_rw.table, 2 * sizeof(unsigned long long) * (size_t)gt_rw.n));
        GT_CK(cudaMalloc((void **)&gt_rw.out, sizeof(unsigned long long) * (size_t)gt_rw.n));
        GT_CK(cudaMemcpy(gt_rw.table, gt_rw.regions, 2 * sizeof(unsigned long long) * (size_t)gt_rw.n,
                         cudaMemcpyHostToDevice));
    }
    gt_rw.device = d->device;
    GT_CK(cudaSetDevice(d->device));
    for (long long k = 1; k <= gt_rw.n; k++)
        gt_tag(k, d->stream);
    GT_CK(cudaStreamSynchronize(d->stream));
    gt_rw.mibps = mibps;
    gt_rw.last = gt_rw.n;
    gt_rw.stop = 0;
    if (pthread_create(&gt_rw.thread, NULL, gt_rewriter, NULL))
        gt_die("pthread_create failed");
    gt_rw.on = 1;
    char extra[64];
    snprintf(extra, sizeof extra, ",\"regions\":%d", gt_rw.n);
    gt_emit("rewriting", extra, NULL, 0);
}

static inline void gt_rewrite_check(const gt_dev *devs)
{
    if (!gt_rw.regions) {
        gt_emit_error("never rewritten");
        return;
    }
    if (gt_rw.on) {
        __atomic_store_n(&gt_rw.stop, 1, __ATOMIC_RELEASE);
        pthread_join(gt_rw.thread, NULL);
        gt_rw.on = 0;
    }
    const gt_dev *d = &devs[gt_rw.device];
    GT_CK(cudaSetDevice(d->device));
    gt_tag_check_kernel<<<gt_rw.n, GT_THREADS, 0, d->stream>>>(gt_rw.table, gt_rw.out);
    GT_CK(cudaGetLastError());
    unsigned long long *tags = (unsigned long long *)malloc(sizeof(unsigned long long) * (size_t)gt_rw.n);
    GT_CK(cudaMemcpyAsync(tags, gt_rw.out, sizeof(unsigned long long) * (size_t)gt_rw.n, cudaMemcpyDeviceToHost, d->stream));
    GT_CK(cudaStreamSynchronize(d->stream));
    unsigned long long m = 0;
    int whole = 1, prefix = 1;
    for (int r = 0; r < gt_rw.n; r++) {
        whole &= tags[r] != ~0ull;
        if (tags[r] != ~0ull && tags[r] > m)
            m = tags[r];
    }
    for (int r = 0; r < gt_rw.n && whole; r++) {
        unsigned long long first = (unsigned long long)r + 1, n = (unsigned long long)gt_rw.n;
        prefix &= m >= first && tags[r] == first + (m - first) / n * n;
    }
    free(tags);
    char extra[160];
    snprintf(extra, sizeof extra, ",\"count\":%lld,\"holds\":%llu,\"regions\":%d,\"whole\":%s,\"prefix\":%s",
             __atomic_load_n(&gt_rw.last, __ATOMIC_ACQUIRE), m, gt_rw.n, whole ? "true" : "false", prefix ? "true" : "false");
    gt_emit("rewritten", extra, NULL, 0);
}

/* The common command loop of the runtime programs: state, mutate, quit.
 * Returns when quit was answered or stdin ended. */
static inline void gt_rt_serve(gt_buf *bufs, int n, const gt_dev *devs)
{
    char cmd[256];
    int gen = 0;
    void *grabbed = NULL; /* grab MiB */
    while (gt_read_cmd(cmd, sizeof cmd)) {
        if (!strcmp(cmd, "state")) {
            gt_rt_checksum_all(bufs, n, devs);
            gt_emit("state", NULL, bufs, n);
        } else if (!strcmp(cmd, "mutate")) {
            gt_rt_fill_all(bufs, n, devs, ++gen);
            gt_rt_checksum_all(bufs, n, devs);
            gt_emit("mutated", NULL, bufs, n);
        } else if (!strncmp(cmd, "touch ", 6)) {
            /* touch P: the first P percent of every buffer rewritten (a
             * new generation), the rest left as it is: what an
             * incremental checkpoint must find. */
            double pct = atof(cmd + 6);
            ++gen;
            for (int i = 0; i < n; i++) {
                gt_buf part = bufs[i];
                part.size = (uint64_t)(bufs[i].size * (pct / 100.0)) / 8 * 8;
                if (!part.size)
                    continue;
                GT_CK(cudaSetDevice(part.device));
                gt_rt_fill(&part, gt_seed(i, gen), devs[part.device].stream);
            }
            gt_rt_checksum_all(bufs, n, devs);
            gt_emit("touched", NULL, bufs, n);
        } else if (!strncmp(cmd, "rewrite ", 8)) {
            gt_rewrite_start(bufs, n, devs, atof(cmd + 8));
        } else if (!strcmp(cmd, "rewritten")) {
            gt_rewrite_check(devs);
        } else if (!strncmp(cmd, "grab ", 5)) {
            /* grab MiB: device memory the program holds besides its buffers,
             * or the error that refused it (the program runs on); ungrab: freed. */
            GT_CK(cudaSetDevice(devs[0].device));
            if (grabbed)
                GT_CK(cudaFree(grabbed));
            grabbed = NULL;
            cudaError_t e = cudaMalloc(&grabbed, (size_t)(atof(cmd + 5) * (double)(1u << 20)));
            if (e != cudaSuccess)
                grabbed = NULL;
            cudaGetLastError();
            char extra[160];
            snprintf(extra, sizeof extra, ",\"ok\":%s,\"error\":\"%s\"", e == cudaSuccess ? "true" : "false", cudaGetErrorName(e));
            gt_emit("grabbed", extra, NULL, 0);
        } else if (!strcmp(cmd, "ungrab")) {
            GT_CK(cudaSetDevice(devs[0].device));
            if (grabbed)
                GT_CK(cudaFree(grabbed));
            grabbed = NULL;
            gt_emit("ungrabbed", NULL, NULL, 0);
        } else if (!strncmp(cmd, "quit", 4) && (cmd[4] == '\0' || cmd[4] == ' ')) {
            int status = cmd[4] ? atoi(cmd + 5) : 0;
            if (gt_rw.on) {
                __atomic_store_n(&gt_rw.stop, 1, __ATOMIC_RELEASE);
                pthread_join(gt_rw.thread, NULL);
                gt_rw.on = 0;
            }
            gt_emit("bye", NULL, NULL, 0);
            if (status)
                exit(status); /* what a restore run attached must pass on */
            return;
        } else {
            gt_unknown(cmd);
        }
    }
}

static inline void gt_emit_ready(const gt_buf *bufs, int n)
{
    char extra[64];
    snprintf(extra, sizeof extra, ",\"pid\":%d", (int)getpid());
    gt_emit("ready", extra, bufs, n);
}

#endif /* runtime helpers */
#endif /* !GT_KERNELS_ONLY */
#endif /* GPUTEST_H */
