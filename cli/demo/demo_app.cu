/* demo_app.cu: the sample program of `gpuckpt demo`.
 *
 * A small CUDA program that keeps three buffers in device memory and lets
 * gpuckpt checkpoint it and roll it back while it runs. It speaks a line
 * protocol on stdin/stdout so the demo (or you, typing) can drive it:
 *
 *   at start  {"event":"ready","pid":N,"buffers":[{"device":0,"addr":"0x..","size":N,"checksum":"<16 hex>"},..]}
 *   state     {"event":"state","buffers":[..]}      checksums of the device data now
 *   mutate    {"event":"mutated","buffers":[..]}    every buffer overwritten (new seed)
 *   quit      {"event":"bye"}                       and exit 0
 *
 * One command per line, exactly one JSON line per command on stdout;
 * anything meant for humans goes to stderr.
 *
 * Try it by hand:
 *   nvcc -o demo_app demo_app.cu
 *   gpuckpt run -- ./demo_app            # prints ready with addresses and checksums
 *   gpuckpt checkpoint PID --gpu-only -o snap   (from another terminal)
 *   type: mutate                         # checksums change
 *   gpuckpt restore snap --into PID
 *   type: state                          # checksums are back to the ready ones
 *
 * Under gpuckpt the addresses printed at start are the same on every run:
 * the shim places every cudaMalloc in a pool at fixed device addresses.
 *
 * Self-contained on purpose: only the CUDA runtime and the C library. */
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Abort with a message on stderr and an error event on stdout. */
#define CHECK(call)                                                                              \
    do {                                                                                         \
        cudaError_t err_ = (call);                                                               \
        if (err_ != cudaSuccess) {                                                               \
            fprintf(stderr, "demo_app: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,              \
                    cudaGetErrorString(err_));                                                   \
            printf("{\"event\":\"error\",\"message\":\"%s failed: %s\"}\n", #call,               \
                   cudaGetErrorName(err_));                                                      \
            fflush(stdout);                                                                      \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

/* The buffers: a model-like layout, sizes in bytes. */
struct buffer {
    const char *name;
    size_t size;
    unsigned char *dev; /* device pointer */
    uint64_t checksum;  /* of the device data, last computed */
};
static buffer buffers[] = {
    {"weights", 64u << 20, NULL, 0},               /* 64 MiB */
    {"activations", (16u << 20) + 4096, NULL, 0}, /* 16 MiB + 4 KiB */
    {"step_state", 1000, NULL, 0},                  /* a small, odd-sized one */
};
static const int NBUF = sizeof buffers / sizeof buffers[0];

/* Deterministic pseudo-random bytes: byte i of a buffer filled with `seed`.
 * (splitmix64 of the 8-byte word index, then the byte of that word.) */
__device__ unsigned char pattern_byte(uint64_t seed, uint64_t i)
{
    uint64_t z = seed + (i / 8 + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (unsigned char)(z >> (8 * (i % 8)));
}

__global__ void fill_kernel(unsigned char *p, size_t n, uint64_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = pattern_byte(seed, i);
}

/* Fill every buffer from `generation` (0 at start, +1 per mutate). */
static void fill_all(int generation)
{
    for (int b = 0; b < NBUF; b++) {
        uint64_t seed = 1000003ull * (b + 1) + 7919ull * generation;
        fill_kernel<<<1024, 256>>>(buffers[b].dev, buffers[b].size, seed);
        CHECK(cudaGetLastError());
    }
    CHECK(cudaDeviceSynchronize());
}

/* FNV-1a 64 over the device bytes, copied back to the host. Any changed
 * byte changes the result (with overwhelming probability). */
static void checksum_all(void)
{
    static unsigned char *host;
    static size_t host_size;
    for (int b = 0; b < NBUF; b++) {
        if (host_size < buffers[b].size) {
            free(host);
            host_size = buffers[b].size;
            host = (unsigned char *)malloc(host_size);
            if (!host) {
                fprintf(stderr, "demo_app: out of host memory\n");
                exit(1);
            }
        }
        CHECK(cudaMemcpy(host, buffers[b].dev, buffers[b].size, cudaMemcpyDeviceToHost));
        uint64_t h = 0xcbf29ce484222325ull;
        for (size_t i = 0; i < buffers[b].size; i++)
            h = (h ^ host[i]) * 0x100000001b3ull;
        buffers[b].checksum = h;
    }
}

/* One protocol line: {"event":EVENT[,"pid":N][,"buffers":[...]]} */
static void reply(const char *event, bool with_pid, bool with_buffers)
{
    printf("{\"event\":\"%s\"", event);
    if (with_pid)
        printf(",\"pid\":%d", (int)getpid());
    if (with_buffers) {
        printf(",\"buffers\":[");
        for (int b = 0; b < NBUF; b++)
            printf("%s{\"device\":0,\"addr\":\"0x%llx\",\"size\":%zu,\"checksum\":\"%016llx\"}", b ? "," : "",
                   (unsigned long long)(uintptr_t)buffers[b].dev, buffers[b].size,
                   (unsigned long long)buffers[b].checksum);
        printf("]");
    }
    printf("}\n");
    fflush(stdout);
}

int main(void)
{
    CHECK(cudaSetDevice(0));
    for (int b = 0; b < NBUF; b++)
        CHECK(cudaMalloc((void **)&buffers[b].dev, buffers[b].size));
    int generation = 0;
    fill_all(generation);
    checksum_all();
    reply("ready", true, true);
    fprintf(stderr, "demo_app: pid %d holds %d buffers; commands: state, mutate, quit\n", (int)getpid(), NBUF);

    char line[256];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0])
            continue;
        if (!strcmp(line, "state")) {
            checksum_all();
            reply("state", false, true);
        } else if (!strcmp(line, "mutate")) {
            fill_all(++generation);
            checksum_all();
            reply("mutated", false, true);
        } else if (!strcmp(line, "quit")) {
            reply("bye", false, false);
            break;
        } else {
            printf("{\"event\":\"error\",\"message\":\"unknown command\"}\n");
            fflush(stdout);
        }
    }
    for (int b = 0; b < NBUF; b++)
        CHECK(cudaFree(buffers[b].dev));
    return 0;
}
