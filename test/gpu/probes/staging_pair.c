// What bounds a pool's copy into staging when two ranks copy at once: each
// process fills GIB GiB of tmpfs files (32 MiB each, as the controller's
// staging) from its own GPU, 16 threads faulting in and pinning pieces while
// the main thread DMAs each piece once ready (shim/control/staging.c). Run
// alone, then with a second process on GPU 1 started at the same instant;
// each step also alone (fault, pin, DMA), and the pipeline beside 15 threads
// that spin (a pool image's codec workers), on memory faulted in before, and
// on 8 threads. Each run twice.
//   nvcc -O2 -o /tmp/sp test/gpu/probes/staging_pair.c -lcuda -lpthread
//   mount -t tmpfs -o huge=always,size=24g none /mnt/hp && /tmp/sp 4.75 /mnt/hp
#define _GNU_SOURCE
#include <cuda.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PIECE (32ul << 20)
#define WORKERS 16
#define CK(x) do { CUresult r_ = (x); if (r_) { printf("FAIL %s = %d (line %d)\n", #x, r_, __LINE__); exit(1); } } while (0)

enum step { WARM_UP, PIPELINE, FAULT, PIN, DMA, PIPELINE_BUSY, FAULTED_PIPELINE, PIPELINE_8, STEPS };
static const char *names[] = { "warm-up (fault+pin+DMA)", "fault+pin+DMA", "fault only", "pin only", "DMA only",
                               "fault+pin+DMA, 15 spinning", "faulted before, pin+DMA", "fault+pin+DMA, 8 threads" };

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

static size_t n, pieces;
static char **piece;
static CUcontext ctx;
static atomic_int next, ready[4096], stop_spin;
static int do_fault, do_pin;

static void *prepare(void *arg)
{
    (void)arg;
    cuCtxSetCurrent(ctx);
    for (;;) {
        int i = atomic_fetch_add(&next, 1);
        if ((size_t)i >= pieces)
            return NULL;
        if (do_fault && madvise(piece[i], PIECE, MADV_POPULATE_WRITE))
            perror("madvise");
        if (do_pin)
            CK(cuMemHostRegister(piece[i], PIECE, CU_MEMHOSTREGISTER_PORTABLE));
        atomic_store(&ready[i], 1);
    }
}

static void *spin(void *arg)
{
    (void)arg;
    volatile unsigned long x = 0;
    while (!atomic_load(&stop_spin))
        x++;
    return NULL;
}

static void child(int gpu, enum step s, const char *dir, int go_fd, int ready_fd)
{
    CK(cuInit(0));
    CUdevice dev;
    CK(cuDeviceGet(&dev, gpu));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CUdeviceptr d;
    CK(cuMemAlloc(&d, n));
    CK(cuMemsetD8(d, 7, n));
    CUstream st;
    CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    for (size_t i = 0; i < pieces; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/sp-%d-%zu", dir, getpid(), i);
        int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd < 0 || ftruncate(fd, PIECE)) { perror(path); exit(1); }
        unlink(path);
        piece[i] = mmap(NULL, PIECE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
    }
    CK(cuCtxSynchronize());
    // The steps not timed are done before the start.
    if (s == PIN || s == DMA || s == FAULTED_PIPELINE)
        for (size_t i = 0; i < pieces; i++)
            madvise(piece[i], PIECE, MADV_POPULATE_WRITE);
    if (s == DMA)
        for (size_t i = 0; i < pieces; i++)
            CK(cuMemHostRegister(piece[i], PIECE, CU_MEMHOSTREGISTER_PORTABLE));
    int pipeline = s == WARM_UP || s == PIPELINE || s == PIPELINE_BUSY || s == FAULTED_PIPELINE || s == PIPELINE_8;
    do_fault = s == FAULT || (pipeline && s != FAULTED_PIPELINE);
    do_pin = s == PIN || pipeline;
    int workers = s == PIPELINE_8 ? 8 : WORKERS;
    pthread_t spinners[15];
    if (s == PIPELINE_BUSY)
        for (int i = 0; i < 15; i++)
            pthread_create(&spinners[i], NULL, spin, NULL);
    char c = 0;
    if (write(ready_fd, &c, 1) != 1 || read(go_fd, &c, 1) != 1)
        exit(1);
    double t0 = now();
    pthread_t t[WORKERS];
    if (s != DMA)
        for (int i = 0; i < workers; i++)
            pthread_create(&t[i], NULL, prepare, NULL);
    if (pipeline || s == DMA) {
        for (size_t i = 0; i < pieces; i++) {
            while (s != DMA && !atomic_load(&ready[i]))
                ;
            CK(cuMemcpyDtoHAsync(piece[i], d + i * PIECE, PIECE, st));
        }
        CK(cuStreamSynchronize(st));
    }
    if (s != DMA)
        for (int i = 0; i < workers; i++)
            pthread_join(t[i], NULL);
    double el = now() - t0;
    atomic_store(&stop_spin, 1);
    if (s == PIPELINE_BUSY)
        for (int i = 0; i < 15; i++)
            pthread_join(spinners[i], NULL);
    printf("  GPU %d: %-28s %.3f s (%.1f GB/s)\n", gpu, names[s], el, n / 1e9 / el);
    fflush(stdout);
    exit(0);
}

int main(int argc, char **argv)
{
    double gib = argc > 1 ? atof(argv[1]) : 4.75;
    const char *dir = argc > 2 ? argv[2] : "/dev/shm";
    pieces = (size_t)(gib * (1 << 30)) / PIECE;
    n = pieces * PIECE;
    piece = calloc(pieces, sizeof *piece);
    printf("%zu pieces of 32 MiB (%.2f GiB) per process, in %s\n", pieces, n / (double)(1 << 30), dir);
    for (int s = 0; s < STEPS; s++) {
        for (int k = 0; k < (s == WARM_UP ? 1 : 4); k++) {
            int procs = 1 + k % 2;
            printf("%s, %d process%s at once\n", names[s], procs, procs > 1 ? "es" : "");
            fflush(stdout);
            int go[2], rd[2];
            if (pipe(go) || pipe(rd))
                return 1;
            for (int p = 0; p < procs; p++)
                if (fork() == 0)
                    child(p, (enum step)s, dir, go[0], rd[1]);
            char c;
            for (int p = 0; p < procs; p++)
                if (read(rd[0], &c, 1) != 1)
                    return 1;
            if (write(go[1], "gg", procs) != procs)
                return 1;
            for (int p = 0; p < procs; p++)
                wait(NULL);
            close(go[0]); close(go[1]); close(rd[0]); close(rd[1]);
        }
    }
    return 0;
}
