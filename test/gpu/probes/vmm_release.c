// Where a suspend's pool release goes (shim/pool/pool.c, gp_pool_release_all:
// each 32 MiB chunk unmapped and released in turn): cuMemUnmap against
// cuMemRelease, chunk by chunk against one unmap of the whole range, and
// the stack limit's shrink after it. Run it on two GPUs at once to see what
// the driver does one process at a time. Usage: vmm_release [chunks] [device]
// (152 chunks: a DDP rank's 4.75 GiB).
//   nvcc -O2 -o /tmp/vmm_release test/gpu/probes/vmm_release.c -lcuda
//   /tmp/vmm_release 152 0 & /tmp/vmm_release 152 1; wait
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHUNK (32ull << 20)
#define CK(x) do { CUresult r_ = (x); if (r_) { const char *s; cuGetErrorString(r_, &s); fprintf(stderr, "%d %s = %d %s\n", __LINE__, #x, r_, s); exit(1); } } while (0)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

static int dev, n;
static CUdeviceptr va;
static CUmemGenericAllocationHandle *h;

/* Every chunk made, mapped, given access and written (as a pool in use). */
static double map_all(void)
{
    CUmemAllocationProp p = {0};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    CUmemAccessDesc a = {{CU_MEM_LOCATION_TYPE_DEVICE, dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    double t0 = now();
    for (int i = 0; i < n; i++) {
        CK(cuMemCreate(&h[i], CHUNK, &p, 0));
        CK(cuMemMap(va + i * CHUNK, CHUNK, 0, h[i], 0));
        CK(cuMemSetAccess(va + i * CHUNK, CHUNK, &a, 1));
    }
    double t = now() - t0;
    CK(cuMemsetD8(va, 0x5a, (size_t)n * CHUNK));
    CK(cuCtxSynchronize());
    return t;
}

int main(int argc, char **argv)
{
    n = argc > 1 ? atoi(argv[1]) : 152;
    dev = argc > 2 ? atoi(argv[2]) : 0;
    h = calloc(n, sizeof *h);
    CK(cuInit(0));
    CUdevice d;
    CK(cuDeviceGet(&d, dev));
    CUcontext ctx;
    CK(cuDevicePrimaryCtxRetain(&ctx, d));
    CK(cuCtxSetCurrent(ctx));
    CK(cuMemAddressReserve(&va, (size_t)n * CHUNK, CHUNK, 0, 0));
    for (int round = 0; round < 3; round++) {
        double m = map_all(), t0 = now(), un = 0, rel = 0;
        for (int i = 0; i < n; i++) {
            double a = now();
            CK(cuMemUnmap(va + i * CHUNK, CHUNK));
            double b = now();
            CK(cuMemRelease(h[i]));
            un += b - a;
            rel += now() - b;
        }
        double each = now() - t0;
        double m2 = map_all();
        t0 = now();
        CK(cuMemUnmap(va, (size_t)n * CHUNK));
        double one = now() - t0;
        t0 = now();
        for (int i = 0; i < n; i++) CK(cuMemRelease(h[i]));
        double rel2 = now() - t0;
        size_t stack;
        CK(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
        t0 = now();
        CK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 16));
        double shrink = now() - t0;
        t0 = now();
        CK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, stack));
        double back = now() - t0;
        printf("device %d, %d chunks, round %d: map %.3f s; chunk by chunk %.3f s (unmap %.3f, release %.3f); "
               "map %.3f s; one unmap %.3f s, releases %.3f s; stack %zu -> 16 in %.3f s, back in %.3f s\n",
               dev, n, round, m, each, un, rel, m2, one, rel2, stack, shrink, back);
    }
    return 0;
}
