// What a suspend's staging costs by the kind of page behind it: GIB GiB as
// 32 MiB memfds (the shim's staging today) or as files on a tmpfs mounted
// with huge=always at DIR, mapped end to end as shim/control/staging.c does.
// Times, for each: faulting in (THREADS threads), pinning with
// cuMemHostRegister, a DMA of the pool into it, unpinning, and the drop the
// CRIU dump waits for (MADV_DONTNEED from many threads, then munmap), with
// the files still open as the snapshot holder keeps them.
//   nvcc -O2 -o /tmp/staging_pages test/gpu/probes/staging_pages.c -lcuda -lpthread
//   mkdir -p /tmp/huge && mount -t tmpfs -o huge=always,size=8g none /tmp/huge && /tmp/staging_pages /tmp/huge 6 8
#define _GNU_SOURCE
#include <cuda.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define FILE_BYTES (32ull << 20)
#define MAX_FILES 4096

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char *s_; cuGetErrorString(r_, &s_); fprintf(stderr, "%s: %s\n", #x, s_); exit(1); } } while (0)

static uint8_t *base;
static size_t total;
static int nfiles, threads;
static CUcontext ctx;

struct slice { size_t at, n; int op; };

static void *work(void *arg)
{
    struct slice *s = arg;
    if (s->op == 0) {
        for (size_t at = s->at; at < s->at + s->n; at += 4096) base[at] = 1;
    } else if (s->op == 1) {
        cuCtxSetCurrent(ctx);
        for (size_t at = s->at; at < s->at + s->n; at += FILE_BYTES) CK(cuMemHostRegister(base + at, FILE_BYTES, CU_MEMHOSTREGISTER_PORTABLE));
    } else {
        madvise(base + s->at, s->n, MADV_DONTNEED);
    }
    return NULL;
}

static double parallel(int op, int n)
{
    pthread_t tid[64];
    struct slice sl[64];
    size_t per = total / n / FILE_BYTES * FILE_BYTES;
    double t0 = now();
    for (int i = 0; i < n; i++) {
        sl[i] = (struct slice){ i * per, i == n - 1 ? total - i * per : per, op };
        pthread_create(&tid[i], NULL, work, &sl[i]);
    }
    for (int i = 0; i < n; i++) pthread_join(tid[i], NULL);
    return now() - t0;
}

static void one(const char *dir, CUdeviceptr dev)
{
    int fds[MAX_FILES];
    base = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    double t0 = now();
    for (int i = 0; i < nfiles; i++) {
        fds[i] = dir ? open(dir, O_TMPFILE | O_RDWR, 0600) : memfd_create("probe", MFD_CLOEXEC);
        if (fds[i] < 0 || ftruncate(fds[i], FILE_BYTES) ||
            mmap(base + i * FILE_BYTES, FILE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fds[i], 0) == MAP_FAILED) {
            perror(dir ? dir : "memfd");
            exit(1);
        }
    }
    double tmap = now() - t0;
    double tfault = parallel(0, threads);
    double tpin = parallel(1, threads);
    t0 = now();
    for (size_t at = 0; at < total; at += FILE_BYTES) /* one copy may not span two registrations */
        CK(cuMemcpyDtoHAsync(base + at, dev + at, FILE_BYTES, 0));
    CK(cuStreamSynchronize(0));
    double tdma = now() - t0;
    t0 = now();
    for (int i = 0; i < nfiles; i++) CK(cuMemHostUnregister(base + i * FILE_BYTES));
    double tunpin = now() - t0;
    t0 = now();
    parallel(2, 32);
    munmap(base, total);
    double tdrop = now() - t0;
    // The controller's own mapping of the same files, as its codec workers read them.
    uint8_t *again = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    for (int i = 0; i < nfiles; i++) mmap(again + i * FILE_BYTES, FILE_BYTES, PROT_READ, MAP_SHARED | MAP_FIXED, fds[i], 0);
    t0 = now();
    volatile uint8_t sum = 0;
    for (size_t at = 0; at < total; at += 4096) sum += again[at];
    double tread = now() - t0;
    t0 = now();
    munmap(again, total);
    double tunmap2 = now() - t0;
    t0 = now();
    for (int i = 0; i < nfiles; i++) close(fds[i]);
    double tfree = now() - t0;
    printf("%-10s %.2f GB: map %.3f s, fault in %.3f s (%d threads), pin %.3f s, DMA %.3f s (%.1f GB/s), unpin %.3f s, "
           "drop %.3f s; another mapping touched %.3f s, unmapped %.3f s; freed %.3f s\n",
           dir ? "huge tmpfs" : "memfd", total / 1e9, tmap, tfault, threads, tpin, tdma, total / 1e9 / tdma, tunpin, tdrop, tread,
           tunmap2, tfree);
}

int main(int argc, char **argv)
{
    if (argc < 2) { fprintf(stderr, "usage: %s HUGE_TMPFS_DIR [GIB] [THREADS] [ROUNDS]\n", argv[0]); return 2; }
    double gib = argc > 2 ? atof(argv[2]) : 6;
    threads = argc > 3 ? atoi(argv[3]) : 8;
    int rounds = argc > 4 ? atoi(argv[4]) : 3;
    nfiles = (int)(gib * (1ull << 30) / FILE_BYTES);
    if (nfiles > MAX_FILES) nfiles = MAX_FILES;
    total = (size_t)nfiles * FILE_BYTES;
    CUdevice d;
    CK(cuInit(0));
    CK(cuDeviceGet(&d, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, d));
    CK(cuCtxSetCurrent(ctx));
    CUdeviceptr dev;
    CK(cuMemAlloc(&dev, total));
    CK(cuMemsetD8(dev, 7, total));
    for (int r = 0; r < rounds; r++) {
        one(NULL, dev);
        one(argv[1], dev);
    }
    return 0;
}
