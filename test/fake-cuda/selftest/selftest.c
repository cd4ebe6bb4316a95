/* Self-test of the fake CUDA driver (test/fake-cuda). Links against it with
 * -lcuda like any driver-API program and checks the behaviour the gpuckpt
 * tests rely on: init rules, devices, the context stack, memory accounting,
 * classic allocations and pointer queries, host registration, VMM at a
 * fixed hint, cuGetProcAddress versioning and per-thread variants, kernels
 * as host functions, streams/events with FAKE_CUDA_SYNC_DELAY_MS,
 * FAKE_CUDA_FAIL, FAKE_CUDA_TRACE, thread safety, and the process
 * checkpoint API (state files, transitions, gpuPairs, FAKE_CUDA_CKPT_BLOCK)
 * on forked children.
 *
 * It sets its own FAKE_CUDA_* environment before the first driver call.
 * Prints "ok N - ..." / "not ok N - ..." lines and "P passed, F failed";
 * exits 1 on any failure.
 */
#define __CUDA_API_VERSION_INTERNAL 1 /* call the exported names explicitly */
#include <cuda.h>
#include <cudaTypedefs.h>

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define GRAN (2 * MiB)
#define MEM_MB 64
#define SYNC_DELAY_MS 40
/* The fixed hint of the VMM section. Under ThreadSanitizer 0x600000000000 is
 * not application memory (TSan's mmap interceptor aborts on it), so a TSan
 * build uses an address in TSan's high application range instead. Under
 * AddressSanitizer the range belongs to ASan's allocator: the reservation
 * then falls back to another address, which the test accepts. */
#ifndef SELFTEST_HINT
#if defined(__SANITIZE_THREAD__)
#define SELFTEST_HINT 0x7e9000000000ULL
#else
#define SELFTEST_HINT 0x600000000000ULL
#endif
#endif
static const CUdeviceptr HINT = SELFTEST_HINT;

static int g_passed, g_failed;
static char g_trace_path[] = "/tmp/fake-cuda-selftest-trace-XXXXXX";
static CUcontext g_prim0, g_prim1;
static int g_pipe[2];
/* FAKE_CUDA_CKPT_DIR is <g_ckpt_root>/state, which the fake creates. */
static char g_ckpt_root[] = "/tmp/fake-cuda-selftest-ckpt-XXXXXX";
static char g_ckpt_dir[sizeof(g_ckpt_root) + 8];

/* Shared with the FAKE_CUDA_CKPT_BLOCK child (MAP_SHARED, made before fork). */
struct block_shared {
    atomic_int go, stop, bad;
    atomic_ulong calls;
};
static struct block_shared *g_blk;
static pid_t g_blk_pid = -1;
static int g_default_dir_status = -1;

/* ---- reporting ------------------------------------------------------------------ */

static void check(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s %d - ", ok ? "ok" : "not ok", g_passed + g_failed + 1);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    if (ok)
        g_passed++;
    else
        g_failed++;
}

static const char *rc_name(CUresult r)
{
    static __thread char buf[32];
    const char *s = NULL;
    if (cuGetErrorName(r, &s) == CUDA_SUCCESS && s)
        return s;
    snprintf(buf, sizeof(buf), "CUresult %d", (int)r);
    return buf;
}

static void expect_rc(CUresult got, CUresult want, const char *call, const char *want_text)
{
    if (got == want)
        check(1, "%s == %s", call, want_text);
    else
        check(0, "%s == %s, got %s", call, want_text, rc_name(got));
}

/* Each macro stringizes its own argument, so the message shows the call as
 * written (not macro-expanded). */
#define EXPECT(call, want) expect_rc((call), (want), #call, #want)
#define OK(call) expect_rc((call), CUDA_SUCCESS, #call, "CUDA_SUCCESS")
#define CHECK(cond, ...) check((cond), __VA_ARGS__)

/* ---- helpers -------------------------------------------------------------------- */

/* Readable/writable without touching the memory from user space: the
 * kernel reports EFAULT instead of the process taking a SIGSEGV. */
static int readable(CUdeviceptr p)
{
    if (write(g_pipe[1], (const void *)(uintptr_t)p, 1) != 1)
        return 0;
    char c;
    return read(g_pipe[0], &c, 1) == 1;
}

static int writable(CUdeviceptr p)
{
    char c = 0;
    if (write(g_pipe[1], &c, 1) != 1)
        return 0;
    if (read(g_pipe[0], (void *)(uintptr_t)p, 1) == 1)
        return 1;
    if (read(g_pipe[0], &c, 1) != 1) /* drain the byte left behind */
        perror("pipe drain");
    return 0;
}

/* Is [addr, addr + len) free right now? */
static int va_free(uint64_t addr, size_t len)
{
    void *p = mmap((void *)(uintptr_t)addr, len, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED)
        return 0;
    munmap(p, len);
    return (uint64_t)(uintptr_t)p == addr;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static size_t free_mem(void)
{
    size_t f = 0, t = 0;
    cuMemGetInfo_v2(&f, &t);
    return f;
}

static CUmemAllocationProp vmm_prop(int dev)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    return p;
}

static CUmemAccessDesc rw_desc(int dev)
{
    CUmemAccessDesc d;
    memset(&d, 0, sizeof(d));
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = dev;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return d;
}

/* A "kernel": p[i] = base + i for i < n. */
static void k_fill(void **args)
{
    uint32_t *p = (uint32_t *)(uintptr_t)*(CUdeviceptr *)args[0];
    uint32_t base = *(uint32_t *)args[1];
    unsigned n = *(unsigned *)args[2];
    for (unsigned i = 0; i < n; i++)
        p[i] = base + i;
}

static void host_fn(void *arg)
{
    (*(int *)arg)++;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* The whole content of a small file into buf; NULL when it cannot be read. */
static const char *slurp(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t len = fread(buf, 1, n - 1, f);
    fclose(f);
    buf[len] = '\0';
    return buf;
}

/* A forked child dies with the self-test (never left LOCKED behind it). */
static void die_with_parent(pid_t parent)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(3);
}

/* Waits up to ms for pid to exit, then kills it. The wait status. */
static int reap(pid_t pid, unsigned ms)
{
    int status = -1;
    for (unsigned waited = 0;; waited++) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return status;
        if (r < 0)
            return -1;
        if (waited >= ms) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        sleep_ms(1);
    }
}

/* ---- sections ------------------------------------------------------------------- */

static void test_preinit(void)
{
    int n = -1;
    CUcontext c;
    CUdeviceptr d;
    const char *s = NULL;
    void *pfn = NULL;
    EXPECT(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT(cuCtxGetCurrent(&c), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT(cuMemAlloc_v2(&d, 16), CUDA_ERROR_NOT_INITIALIZED);
    CUprocessState st;
    EXPECT(cuCheckpointProcessGetState(getpid(), &st), CUDA_ERROR_NOT_INITIALIZED);
    OK(cuDriverGetVersion(&n));
    CHECK(n == 13000, "cuDriverGetVersion gives 13000 (%d)", n);
    OK(cuGetErrorName(CUDA_ERROR_NOT_INITIALIZED, &s));
    CHECK(s && strcmp(s, "CUDA_ERROR_NOT_INITIALIZED") == 0, "cuGetErrorName works before cuInit");
    OK(cuGetProcAddress_v2("cuInit", &pfn, 12000, 0, NULL));
    CHECK(pfn == (void *)cuInit, "cuGetProcAddress_v2 works before cuInit");
    EXPECT(cuInit(1), CUDA_ERROR_INVALID_VALUE);
}

/* FAKE_CUDA_NO_DEVICE=1 in a child, before the environment is read. */
static void test_no_device(void)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("FAKE_CUDA_NO_DEVICE", "1", 1);
        unsetenv("FAKE_CUDA_TRACE");
        int n;
        int ok = cuInit(0) == CUDA_ERROR_NO_DEVICE && cuDeviceGetCount(&n) == CUDA_ERROR_NOT_INITIALIZED;
        _exit(ok ? 0 : 1);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "FAKE_CUDA_NO_DEVICE=1: cuInit gives CUDA_ERROR_NO_DEVICE, calls stay uninitialized");
}

static void test_devices(void)
{
    int n = 0, v = -1;
    CUdevice dev = -1;
    char name[64], bus[32];
    CUuuid u;
    size_t total = 0;
    OK(cuDeviceGetCount(&n));
    CHECK(n == 2, "FAKE_CUDA_DEVICES=2 gives 2 devices (%d)", n);
    OK(cuDeviceGet(&dev, 1));
    CHECK(dev == 1, "cuDeviceGet(1) is device 1");
    EXPECT(cuDeviceGet(&dev, 2), CUDA_ERROR_INVALID_DEVICE);
    OK(cuDeviceGetName(name, sizeof(name), 1));
    CHECK(strcmp(name, "Fake CUDA Device 1") == 0, "name is \"%s\"", name);
    OK(cuDeviceGetUuid_v2(&u, 1));
    CHECK(memcmp(u.bytes, "FAKE\x01", 5) == 0 && u.bytes[15] == 0, "uuid of device 1 is FAKE,1,0...");
    OK(cuDeviceGetUuid(&u, 0));
    CHECK(memcmp(u.bytes, "FAKE\x00", 5) == 0, "legacy cuDeviceGetUuid answers too");
    OK(cuDeviceTotalMem_v2(&total, 0));
    CHECK(total == MEM_MB * MiB, "total memory is FAKE_CUDA_MEM_MB (%zu)", total);
    struct { CUdevice_attribute a; int want; } attrs[] = {
        { CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9 },
        { CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0 },
        { CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1 },
        { CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1 },
        { CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 4 },
        { CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 0 },
    };
    for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++) {
        v = -1;
        OK(cuDeviceGetAttribute(&v, attrs[i].a, 0));
        CHECK(v == attrs[i].want, "attribute %d is %d (%d)", attrs[i].a, attrs[i].want, v);
    }
    EXPECT(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 5), CUDA_ERROR_INVALID_DEVICE);
    OK(cuDeviceGetPCIBusId(bus, sizeof(bus), 1));
    CHECK(strcmp(bus, "0000:01:00.0") == 0, "PCI bus id of device 1 is %s", bus);
    OK(cuDeviceGetByPCIBusId(&dev, "0000:01:00.0"));
    CHECK(dev == 1, "cuDeviceGetByPCIBusId goes back to device 1");
}

struct thread_ctx_result {
    CUcontext initial;
    CUresult alloc_none, alloc_set;
};

static void *thread_ctx_main(void *arg)
{
    struct thread_ctx_result *r = arg;
    CUdeviceptr d = 0;
    cuCtxGetCurrent(&r->initial);
    r->alloc_none = cuMemAlloc_v2(&d, 64);
    cuCtxSetCurrent(g_prim0);
    r->alloc_set = cuMemAlloc_v2(&d, 64);
    if (r->alloc_set == CUDA_SUCCESS)
        cuMemFree_v2(d);
    return NULL;
}

static void test_contexts(void)
{
    CUcontext c = (CUcontext)1, c2, c3;
    CUdevice dev = -1;
    CUdeviceptr d;
    unsigned flags, api = 0;
    int active = -1;
    unsigned long long id0 = 0, id2 = 0;

    OK(cuCtxGetCurrent(&c));
    CHECK(c == NULL, "no current context at first");
    EXPECT(cuMemAlloc_v2(&d, 16), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT(cuCtxPopCurrent_v2(&c), CUDA_ERROR_INVALID_CONTEXT);

    OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK(active == 0, "primary context inactive before retain");
    OK(cuDevicePrimaryCtxRetain(&g_prim0, 0));
    OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK(active == 1, "primary context active after retain");
    OK(cuCtxSetCurrent(g_prim0));
    OK(cuCtxGetCurrent(&c));
    CHECK(c == g_prim0, "cuCtxSetCurrent makes it current");
    OK(cuCtxGetDevice(&dev));
    CHECK(dev == 0, "cuCtxGetDevice is 0");

    OK(cuDevicePrimaryCtxRetain(&g_prim1, 1));
    OK(cuCtxPushCurrent_v2(g_prim1));
    OK(cuCtxGetDevice(&dev));
    CHECK(dev == 1, "pushed device 1's primary context");
    OK(cuCtxPopCurrent_v2(&c));
    CHECK(c == g_prim1, "pop returns the pushed context");
    OK(cuCtxGetCurrent(&c));
    CHECK(c == g_prim0, "pop uncovers the previous one");

    OK(cuCtxCreate_v4(&c2, NULL, 0, 1));
    OK(cuCtxGetCurrent(&c));
    CHECK(c == c2, "cuCtxCreate_v4 pushes the new context");
    OK(cuCtxGetDevice(&dev));
    CHECK(dev == 1, "created context is on device 1");
    OK(cuCtxGetDevice_v2(&dev, g_prim0));
    CHECK(dev == 0, "cuCtxGetDevice_v2 with an explicit context");
    OK(cuCtxGetApiVersion(NULL, &api));
    CHECK(api == 3020, "cuCtxGetApiVersion is 3020 (%u)", api);
    OK(cuCtxGetId(g_prim0, &id0));
    OK(cuCtxGetId(NULL, &id2));
    CHECK(id0 && id2 && id0 != id2, "context ids differ");
    OK(cuCtxSynchronize_v2(NULL));

    /* Destroying a context frees its memory. */
    size_t before = free_mem();
    OK(cuMemAlloc_v2(&d, 4 * MiB));
    CHECK(free_mem() == before - 4 * MiB, "allocation on the created context is charged");
    OK(cuCtxDestroy_v2(c2));
    OK(cuCtxGetCurrent(&c));
    CHECK(c == g_prim0, "cuCtxDestroy_v2 pops the current context");
    OK(cuCtxPushCurrent_v2(g_prim1));
    CHECK(free_mem() == before, "its allocation went with it");
    OK(cuCtxPopCurrent_v2(NULL));
    EXPECT(cuCtxPushCurrent_v2(c2), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    EXPECT(cuCtxDestroy_v2(c2), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT(cuCtxDestroy_v2(g_prim0), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT(cuCtxPushCurrent_v2((CUcontext)&before), CUDA_ERROR_INVALID_CONTEXT);

    /* A context destroyed while below the top stays on the stack, dead. */
    OK(cuCtxCreate_v2(&c3, 0, 0));
    OK(cuCtxPushCurrent_v2(g_prim0));
    OK(cuCtxDestroy_v2(c3));
    OK(cuCtxPopCurrent_v2(NULL));
    EXPECT(cuMemAlloc_v2(&d, 16), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    OK(cuCtxPopCurrent_v2(&c));
    CHECK(c == c3, "the stale entry pops as the destroyed context");

    /* Releasing a primary context to zero deactivates it and frees its memory. */
    OK(cuCtxPushCurrent_v2(g_prim1));
    before = free_mem();
    OK(cuMemAlloc_v2(&d, 2 * MiB));
    OK(cuDevicePrimaryCtxRelease_v2(1));
    OK(cuDevicePrimaryCtxGetState(1, &flags, &active));
    CHECK(active == 0, "released primary context is inactive");
    EXPECT(cuMemAlloc_v2(&d, 16), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    EXPECT(cuDevicePrimaryCtxRelease_v2(1), CUDA_ERROR_INVALID_CONTEXT);
    OK(cuDevicePrimaryCtxRetain(&c, 1));
    CHECK(c == g_prim1, "the primary context handle is stable");
    CHECK(free_mem() == before, "its allocation was freed at release");
    OK(cuCtxSetCurrent(NULL));
    OK(cuCtxGetCurrent(&c));
    CHECK(c == g_prim0, "cuCtxSetCurrent(NULL) pops");

    /* The stack is per thread. */
    struct thread_ctx_result tr = { (CUcontext)1, 0, 0 };
    pthread_t t;
    pthread_create(&t, NULL, thread_ctx_main, &tr);
    pthread_join(t, NULL);
    CHECK(tr.initial == NULL, "a new thread has no current context");
    CHECK(tr.alloc_none == CUDA_ERROR_INVALID_CONTEXT, "and cannot allocate (%s)", rc_name(tr.alloc_none));
    CHECK(tr.alloc_set == CUDA_SUCCESS, "until it sets one");
}

/* FAKE_CUDA_FAIL=cuMemCreate:3,cuMemcpyDtoHAsync_v2:1,cuStreamQuery:2. This
 * section makes the first calls of those three functions. */
static void test_fail_injection(void)
{
    CUmemAllocationProp prop = vmm_prop(0);
    CUmemGenericAllocationHandle h[4] = { 0 };
    size_t before = free_mem();
    OK(cuMemCreate(&h[0], GRAN, &prop, 0));
    OK(cuMemCreate(&h[1], GRAN, &prop, 0));
    size_t mid = free_mem();
    EXPECT(cuMemCreate(&h[2], GRAN, &prop, 0), CUDA_ERROR_UNKNOWN);
    CHECK(free_mem() == mid && h[2] == 0, "the injected failure had no side effect");
    OK(cuMemCreate(&h[3], GRAN, &prop, 0));
    OK(cuMemRelease(h[0]));
    OK(cuMemRelease(h[1]));
    OK(cuMemRelease(h[3]));
    CHECK(free_mem() == before, "handles released");

    CUdeviceptr d;
    char buf[8];
    OK(cuMemAlloc_v2(&d, 64));
    EXPECT(cuMemcpyDtoHAsync_v2(buf, d, 8, NULL), CUDA_ERROR_UNKNOWN);
    OK(cuMemcpyDtoHAsync_v2_ptsz(buf, d, 8, NULL)); /* counted under its own name */
    OK(cuMemcpyDtoHAsync_v2(buf, d, 8, NULL));
    OK(cuMemFree_v2(d));

    CUstream s;
    OK(cuStreamCreate(&s, 0));
    OK(cuStreamQuery(s));
    EXPECT(cuStreamQuery(s), CUDA_ERROR_UNKNOWN);
    OK(cuStreamQuery(s));
    OK(cuStreamDestroy_v2(s));
}

static void test_accounting(void)
{
    size_t f0 = 0, t = 0, f;
    CUdeviceptr d, big;
    OK(cuMemGetInfo_v2(&f0, &t));
    CHECK(t == MEM_MB * MiB && f0 == t, "cuMemGetInfo_v2: all %zu bytes free", t);
    OK(cuMemAlloc_v2(&d, 10 * MiB));
    CHECK(free_mem() == f0 - 10 * MiB, "cuMemAlloc_v2 charges its bytes");
    EXPECT(cuMemAlloc_v2(&big, (MEM_MB - 9) * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    CUmemAllocationProp prop = vmm_prop(0);
    CUmemGenericAllocationHandle h, hbig;
    OK(cuMemCreate(&h, 8 * MiB, &prop, 0));
    CHECK(free_mem() == f0 - 18 * MiB, "cuMemCreate charges its bytes");
    EXPECT(cuMemCreate(&hbig, (MEM_MB - 16) * MiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CUdeviceptr m;
    OK(cuMemAllocManaged(&m, 1 * MiB, CU_MEM_ATTACH_GLOBAL));
    CHECK(free_mem() == f0 - 19 * MiB, "cuMemAllocManaged charges its bytes");
    void *host;
    OK(cuMemAllocHost_v2(&host, 4 * MiB));
    CHECK(free_mem() == f0 - 19 * MiB, "pinned host memory is not device memory");

    /* Device 1 has its own counter. */
    OK(cuCtxPushCurrent_v2(g_prim1));
    OK(cuMemGetInfo_v2(&f, &t));
    CHECK(f == t, "device 1 is untouched");
    CUmemAllocationProp prop1 = vmm_prop(1);
    CUmemGenericAllocationHandle h1;
    OK(cuMemCreate(&h1, 4 * MiB, &prop1, 0));
    CHECK(free_mem() == t - 4 * MiB, "cuMemCreate on device 1 charges device 1");
    OK(cuMemRelease(h1));
    OK(cuCtxPopCurrent_v2(NULL));

    OK(cuMemFree_v2(d));
    OK(cuMemRelease(h));
    OK(cuMemFree_v2(m));
    OK(cuMemFreeHost(host));
    CHECK(free_mem() == f0, "everything freed: back to %zu", f0);
}

static void test_classic(void)
{
    CUdeviceptr d, d2, p, m;
    size_t pitch = 0;
    char in[256], out[256];
    for (int i = 0; i < 256; i++)
        in[i] = (char)i;

    OK(cuMemAlloc_v2(&d, 4096));
    EXPECT(cuMemAlloc_v2(&d2, 0), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAlloc_v2(&d2, 4096));
    OK(cuMemcpyHtoD_v2(d, in, sizeof(in)));
    CHECK(memcmp((void *)(uintptr_t)d, in, sizeof(in)) == 0, "HtoD lands at the device address");
    ((char *)(uintptr_t)d)[5] = 42; /* a "kernel" writes through the pointer */
    OK(cuMemcpyDtoD_v2(d2, d, 256));
    OK(cuMemcpyDtoH_v2(out, d2, sizeof(out)));
    CHECK(out[5] == 42 && out[6] == 6, "DtoD then DtoH read it back");
    OK(cuMemsetD8_v2(d, 0x5a, 100));
    OK(cuMemsetD32_v2(d + 128, 0x01020304, 4));
    CHECK(((unsigned char *)(uintptr_t)d)[99] == 0x5a && ((uint32_t *)(uintptr_t)(d + 128))[3] == 0x01020304,
          "memsets wrote");
    EXPECT(cuMemsetD32_v2(d + 1, 0, 1), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemcpy(d2, (CUdeviceptr)(uintptr_t)in, 16));
    OK(cuMemcpy((CUdeviceptr)(uintptr_t)out, (CUdeviceptr)(uintptr_t)in, 16));
    EXPECT(cuMemcpyHtoD_v2(d + 4000, in, 200), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemcpyHtoD_v2((CUdeviceptr)(uintptr_t)out, in, 16), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemcpyHtoD_v2(d, in, 0));

    OK(cuMemAllocPitch_v2(&p, &pitch, 1000, 3, 4));
    CHECK(pitch == 1024, "pitch rounded to 512 (%zu)", pitch);
    EXPECT(cuMemAllocPitch_v2(&p, &pitch, 1000, 3, 3), CUDA_ERROR_INVALID_VALUE);

    /* Pointer queries. */
    CUcontext ctx = NULL;
    unsigned type = 0, managed = 9, mapped = 0;
    int ordinal = -1;
    CUdeviceptr start = 0, dp = 0;
    size_t size = 0;
    unsigned long long id1 = 0, id2 = 0;
    void *hp;
    OK(cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, d + 10));
    OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 10));
    OK(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, d + 10));
    OK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, d + 10));
    OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d + 10));
    OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 10));
    OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 10));
    OK(cuPointerGetAttribute(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, d + 10));
    OK(cuPointerGetAttribute(&id1, CU_POINTER_ATTRIBUTE_BUFFER_ID, d));
    OK(cuPointerGetAttribute(&id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, d2));
    CHECK(ctx == g_prim0 && type == CU_MEMORYTYPE_DEVICE && dp == d + 10 && managed == 0 && ordinal == 0 &&
              start == d && size == 4096 && mapped == 1,
          "attributes of an interior pointer of cuMemAlloc memory");
    CHECK(id1 && id2 && id1 != id2, "buffer ids are unique");
    EXPECT(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, d), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)in),
           CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr base = 0;
    OK(cuMemGetAddressRange_v2(&base, &size, d + 100));
    CHECK(base == d && size == 4096, "cuMemGetAddressRange_v2 of classic memory");
    OK(cuMemGetAddressRange_v2(NULL, &size, d + 100));
    EXPECT(cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)(uintptr_t)in), CUDA_ERROR_NOT_FOUND);

    CUpointer_attribute which[3] = { CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                     CU_POINTER_ATTRIBUTE_HOST_POINTER };
    type = 7;
    ordinal = 7;
    hp = (void *)1;
    void *data[3] = { &type, &ordinal, &hp };
    OK(cuPointerGetAttributes(3, which, data, (CUdeviceptr)(uintptr_t)in));
    CHECK(type == 0 && ordinal == 0 && hp == NULL, "cuPointerGetAttributes zeroes for a host pointer");
    OK(cuPointerGetAttributes(3, which, data, d));
    CHECK(type == CU_MEMORYTYPE_DEVICE && hp == NULL, "and for what does not apply");

    OK(cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL));
    OK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, m));
    CHECK(managed == 1, "managed memory says so");
    EXPECT(cuMemAllocManaged(&m, 4096, 7), CUDA_ERROR_INVALID_VALUE);

    void *host = NULL;
    OK(cuMemHostAlloc(&host, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
    OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)host));
    OK(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, (CUdeviceptr)(uintptr_t)host));
    CHECK(type == CU_MEMORYTYPE_HOST && hp == host, "pinned host memory is HOST, host pointer itself");
    OK(cuMemHostGetDevicePointer_v2(&dp, host, 0));
    CHECK(dp == (CUdeviceptr)(uintptr_t)host, "device pointer of pinned memory is the same address");
    OK(cuMemcpyHtoD_v2(dp, in, 16));
    EXPECT(cuMemFree_v2((CUdeviceptr)(uintptr_t)host), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFreeHost(host));
    OK(cuMemFreeHost(NULL));

    CUstream s;
    CUdeviceptr a;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuMemAllocAsync(&a, 8192, s));
    OK(cuMemcpyHtoDAsync_v2(a, in, 256, s));
    OK(cuMemsetD8Async(a, 1, 16, s));
    OK(cuMemsetD32Async_ptsz(a + 16, 2, 4, s));
    OK(cuMemcpyAsync_ptsz(a + 64, a, 32, CU_STREAM_PER_THREAD));
    CHECK(((char *)(uintptr_t)a)[64] == 1 && ((uint32_t *)(uintptr_t)a)[4] == 2, "async work is done on return");
    OK(cuMemFreeAsync(a, s));
    EXPECT(cuMemcpyHtoD_v2(a, in, 16), CUDA_ERROR_INVALID_VALUE);
    OK(cuStreamDestroy_v2(s));

    EXPECT(cuMemFree_v2(d + 1), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree_v2(0));
    OK(cuMemFree_v2(d));
    EXPECT(cuMemFree_v2(d), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree_v2(d2));
    OK(cuMemFree_v2(p));
    OK(cuMemFree_v2(m));
}

static void test_hostreg(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *buf = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned type = 0;
    OK(cuMemHostRegister_v2(buf, 2 * page, CU_MEMHOSTREGISTER_PORTABLE));
    EXPECT(cuMemHostRegister_v2(buf + page, 2 * page, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    OK(cuMemHostRegister(buf + 2 * page, page, 0));
    OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)(buf + 10)));
    CHECK(type == CU_MEMORYTYPE_HOST, "registered memory is HOST");
    OK(cuMemcpyHtoD_v2((CUdeviceptr)(uintptr_t)buf, "abc", 4));
    EXPECT(cuMemHostUnregister(buf + page), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    EXPECT(cuMemHostUnregister(buf + 3 * page), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    EXPECT(cuMemHostUnregister(NULL), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemHostUnregister(buf));
    OK(cuMemHostUnregister(buf + 2 * page));
    EXPECT(cuMemHostUnregister(buf), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    munmap(buf, 4 * page);
}

static void test_vmm(void)
{
    CUmemAllocationProp prop = vmm_prop(0), prop1 = vmm_prop(1);
    CUmemAccessDesc rw = rw_desc(0);
    size_t gran = 0;
    const size_t RES = 8 * GRAN;
    size_t f0 = free_mem();

    OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CHECK(gran == GRAN, "minimum granularity is 2 MiB");
    OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    CHECK(gran == GRAN, "recommended granularity is 2 MiB");

    int hint_free = va_free(HINT, RES);
    CUdeviceptr base = 0, base2 = 0, dummy;
    OK(cuMemAddressReserve(&base, RES, 0, HINT, 0));
    if (hint_free)
        CHECK(base == HINT, "reservation at the hint 0x%llx", (unsigned long long)HINT);
    else
        CHECK(base != HINT && base % GRAN == 0,
              "hint 0x%llx was taken (e.g. by the sanitizer's allocator): got aligned 0x%llx instead",
              (unsigned long long)HINT, (unsigned long long)base);
    OK(cuMemAddressReserve(&base2, RES, 0, base, 0));
    CHECK(base2 != base && base2 % GRAN == 0, "hint already reserved: another aligned address");
    EXPECT(cuMemAddressReserve(&dummy, GRAN + 4096, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAddressReserve(&dummy, GRAN, 3 * GRAN, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK(!readable(base), "a bare reservation is inaccessible");

    CUmemGenericAllocationHandle h1, h2, h3, hr;
    OK(cuMemCreate(&h1, 2 * GRAN, &prop, 0));
    OK(cuMemMap(base, 2 * GRAN, 0, h1, 0));
    CHECK(!readable(base) && !writable(base), "mapped but no access before cuMemSetAccess");
    char in[64] = "written through the pointer";
    EXPECT(cuMemcpyHtoD_v2(base, in, 16), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemSetAccess(base, 2 * GRAN, &rw, 1));
    CHECK(readable(base) && writable(base + 2 * GRAN - 1), "read/write after cuMemSetAccess");
    strcpy((char *)(uintptr_t)base, in);
    ((uint32_t *)(uintptr_t)base)[1000] = 0xdeadbeef;
    char out[64] = { 0 };
    OK(cuMemcpyDtoH_v2(out, base, sizeof(out)));
    CHECK(strcmp(out, in) == 0, "DtoH sees what was written through the pointer");
    unsigned long long acc = 9;
    OK(cuMemGetAccess(&acc, &rw.location, base + 5));
    CHECK(acc == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "cuMemGetAccess reports READWRITE");

    /* Queries on VMM addresses. */
    CUdeviceptr rbase = 0, start = 0, mbase = 0;
    size_t rsize = 0, size = 0, msize = 0;
    int ordinal = -1;
    unsigned type = 0, mapped = 9, types = 0;
    void *hp;
    OK(cuMemGetAddressRange_v2(&rbase, &rsize, base + GRAN + 100));
    CHECK(rbase == base && rsize == 2 * GRAN, "cuMemGetAddressRange_v2 gives the mapped piece");
    OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, base + 100));
    OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, base + 100));
    OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, base + 100));
    OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, base + 100));
    OK(cuPointerGetAttribute(&mbase, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, base + 100));
    OK(cuPointerGetAttribute(&msize, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, base + 100));
    OK(cuPointerGetAttribute(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, base + 100));
    OK(cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, base + 100));
    CHECK(ordinal == 0 && type == CU_MEMORYTYPE_DEVICE && mapped == 1 &&
              types == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
          "pointer attributes of VMM memory");
    CHECK(start == base && size == RES, "RANGE_START_ADDR/RANGE_SIZE name the reservation (documented)");
    CHECK(mbase == base && msize == 2 * GRAN, "MAPPING_BASE_ADDR/MAPPING_SIZE name the mapped piece");
    EXPECT(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, base), CUDA_ERROR_INVALID_VALUE);
    OK(cuPointerGetAttribute(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, base + 5 * GRAN));
    CHECK(mapped == 0, "unmapped part of a reservation: MAPPED is 0");
    EXPECT(cuMemGetAddressRange_v2(&rbase, &rsize, base + 5 * GRAN), CUDA_ERROR_NOT_FOUND);

    /* Unmap keeps the reservation and the contents; remap elsewhere. */
    EXPECT(cuMemUnmap(base, GRAN), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemUnmap(base, 2 * GRAN));
    CHECK(!readable(base), "inaccessible again after cuMemUnmap");
    EXPECT(cuMemUnmap(base, 2 * GRAN), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemMap(base + 2 * GRAN, 2 * GRAN, 0, h1, 0));
    OK(cuMemSetAccess(base + 2 * GRAN, 2 * GRAN, &rw, 1));
    CHECK(((uint32_t *)(uintptr_t)(base + 2 * GRAN))[1000] == 0xdeadbeef, "remapped handle kept its bytes");
    OK(cuMemMap(base, 2 * GRAN, 0, h1, 0)); /* the same handle twice */
    OK(cuMemSetAccess(base, 2 * GRAN, &rw, 1));
    ((uint32_t *)(uintptr_t)base)[7] = 77;
    CHECK(((uint32_t *)(uintptr_t)(base + 2 * GRAN))[7] == 77, "two mappings of one handle share memory");

    /* Errors. */
    EXPECT(cuMemMap(base + GRAN, 2 * GRAN, 0, h1, 0), CUDA_ERROR_INVALID_VALUE);       /* overlap */
    EXPECT(cuMemMap(base + 7 * GRAN, 2 * GRAN, 0, h1, 0), CUDA_ERROR_INVALID_VALUE);   /* past the end */
    EXPECT(cuMemMap(base + 4 * GRAN, 2 * GRAN, GRAN, h1, 0), CUDA_ERROR_INVALID_VALUE); /* beyond the handle */
    EXPECT(cuMemMap(base + 4 * GRAN, GRAN, 0, (CUmemGenericAllocationHandle)in, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemSetAccess(base, GRAN, &rw, 1), CUDA_ERROR_INVALID_VALUE);               /* part of a mapping */

    /* A mapping at an offset, and a device-1 handle. */
    OK(cuMemMap(base + 4 * GRAN, GRAN, GRAN, h1, 0));
    OK(cuMemSetAccess(base + 4 * GRAN, GRAN, &rw, 1));
    CHECK(((uint32_t *)(uintptr_t)(base + 4 * GRAN))[0] == ((uint32_t *)(uintptr_t)(base + GRAN))[0],
          "offset mapping shows the second half of the handle");
    OK(cuMemCreate(&h2, GRAN, &prop1, 0));
    OK(cuMemMap(base + 5 * GRAN, GRAN, 0, h2, 0));
    CUmemAccessDesc two[2] = { rw_desc(0), rw_desc(1) };
    OK(cuMemSetAccess(base + 4 * GRAN, 2 * GRAN, two, 2));
    OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, base + 5 * GRAN));
    CHECK(ordinal == 1, "DEVICE_ORDINAL is the handle's device");

    OK(cuMemRetainAllocationHandle(&hr, (void *)(uintptr_t)(base + 5 * GRAN + 123)));
    CHECK(hr == h2, "cuMemRetainAllocationHandle finds the handle");
    OK(cuMemRelease(hr));
    CUmemAllocationProp got;
    OK(cuMemGetAllocationPropertiesFromHandle(&got, h2));
    CHECK(got.location.id == 1 && got.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
          "properties come back from the handle");

    /* Export as a POSIX fd, import back, map: same memory. */
    int fd = -1;
    OK(cuMemExportToShareableHandle(&fd, h1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    uint32_t *view = fd >= 0 ? mmap(NULL, 2 * GRAN, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    CHECK(view != MAP_FAILED && view[1000] == 0xdeadbeef, "the exported fd holds the handle's bytes");
    if (view != MAP_FAILED)
        munmap(view, 2 * GRAN);
    OK(cuMemImportFromShareableHandle(&h3, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(fd);
    OK(cuMemMap(base + 6 * GRAN, 2 * GRAN, 0, h3, 0));
    OK(cuMemSetAccess(base + 6 * GRAN, 2 * GRAN, &rw, 1));
    CHECK(((uint32_t *)(uintptr_t)(base + 6 * GRAN))[7] == 77, "imported handle maps the same memory");
    OK(cuMemGetAllocationPropertiesFromHandle(&got, h3));
    CHECK(got.location.id == 0, "imported handle knows its device");
    CUmemAllocationProp noexport = vmm_prop(0);
    noexport.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    CUmemGenericAllocationHandle hn;
    OK(cuMemCreate(&hn, GRAN, &noexport, 0));
    EXPECT(cuMemExportToShareableHandle(&fd, hn, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
           CUDA_ERROR_INVALID_VALUE);
    OK(cuMemRelease(hn));

    /* Lifetime: a released handle lives while mapped. */
    size_t mid = free_mem();
    OK(cuMemRelease(h1));
    OK(cuMemRelease(h3));
    CHECK(free_mem() == mid && ((uint32_t *)(uintptr_t)base)[7] == 77, "released while mapped: still there");
    EXPECT(cuMemRelease(h1), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemUnmap(base, 4 * GRAN)); /* two whole mappings in one call */
    OK(cuMemUnmap(base + 4 * GRAN, GRAN));
    OK(cuMemUnmap(base + 6 * GRAN, 2 * GRAN));
    CHECK(free_mem() == mid + 2 * GRAN, "last mapping gone: the handle's bytes are freed");
    OK(cuMemRelease(h2)); /* h2 stays mapped: cuMemAddressFree drops it */

    OK(cuMemAddressFree(base, RES));
    EXPECT(cuMemAddressFree(base, RES), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAddressFree(base2, GRAN), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAddressFree(base2, RES));
    CHECK(free_mem() == f0, "all VMM memory returned");
    CHECK(!hint_free || va_free(HINT, RES), "the hint range is free again");
}

static void test_proc(void)
{
    void *p = (void *)1;
    CUdriverProcAddressQueryResult st = 99;
    const cuuint64_t PT = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    struct {
        const char *name;
        int version;
        cuuint64_t flags;
        void *want;
    } cases[] = {
        { "cuMemAlloc", 12000, 0, (void *)cuMemAlloc_v2 },
        { "cuMemAlloc", 3020, 0, (void *)cuMemAlloc_v2 },
        { "cuMemAlloc", 12000, PT, (void *)cuMemAlloc_v2 },
        { "cuCtxCreate", 13000, 0, (void *)cuCtxCreate_v4 },
        { "cuCtxCreate", 12050, 0, (void *)cuCtxCreate_v4 },
        { "cuCtxCreate", 12000, 0, (void *)cuCtxCreate_v3 },
        { "cuCtxCreate", 3020, 0, (void *)cuCtxCreate_v2 },
        { "cuCtxCreate", 2000, 0, (void *)cuCtxCreate },
        { "cuCtxSynchronize", 13000, 0, (void *)cuCtxSynchronize_v2 },
        { "cuCtxSynchronize", 12090, 0, (void *)cuCtxSynchronize },
        { "cuMemcpyHtoD", 12000, 0, (void *)cuMemcpyHtoD_v2 },
        { "cuMemcpyHtoD", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, (void *)cuMemcpyHtoD_v2 },
        { "cuMemcpyHtoD", 12000, PT, (void *)cuMemcpyHtoD_v2_ptds },
        { "cuMemcpyHtoD", 6050, PT, (void *)cuMemcpyHtoD_v2 },
        { "cuMemcpyDtoHAsync", 12000, PT, (void *)cuMemcpyDtoHAsync_v2_ptsz },
        { "cuMemsetD8", 12000, PT, (void *)cuMemsetD8_v2_ptds },
        { "cuStreamSynchronize", 12000, PT, (void *)cuStreamSynchronize_ptsz },
        { "cuLaunchKernel", 12000, PT, (void *)cuLaunchKernel_ptsz },
        { "cuLaunchKernel", 12000, 0, (void *)cuLaunchKernel },
        { "cuDeviceGetUuid", 12000, 0, (void *)cuDeviceGetUuid_v2 },
        { "cuDeviceGetUuid", 11000, 0, (void *)cuDeviceGetUuid },
        { "cuEventElapsedTime", 12080, 0, (void *)cuEventElapsedTime_v2 },
        { "cuMemCreate", 12000, 0, (void *)cuMemCreate },
        { "cuGetProcAddress", 12000, 0, (void *)cuGetProcAddress_v2 },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        p = (void *)1;
        st = 99;
        CUresult r = cuGetProcAddress_v2(cases[i].name, &p, cases[i].version, cases[i].flags, &st);
        CHECK(r == CUDA_SUCCESS && st == CU_GET_PROC_ADDRESS_SUCCESS && p == cases[i].want,
              "cuGetProcAddress_v2(\"%s\", %d, flags %llu) picks the right variant", cases[i].name,
              cases[i].version, (unsigned long long)cases[i].flags);
    }
    EXPECT(cuGetProcAddress_v2("cuMemAlloc", &p, 3000, 0, &st), CUDA_ERROR_NOT_FOUND);
    CHECK(p == NULL && st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, "version too low: NOT_SUFFICIENT, NULL");
    p = (void *)1;
    EXPECT(cuGetProcAddress_v2("cuNoSuchFunction", &p, 12000, 0, &st), CUDA_ERROR_NOT_FOUND);
    CHECK(p == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, "unknown: SYMBOL_NOT_FOUND, NULL");
    EXPECT(cuGetProcAddress_v2("cuMemAlloc_v2", &p, 12000, 0, &st), CUDA_ERROR_NOT_FOUND);
    EXPECT(cuGetProcAddress_v2("cuMemAlloc", &p, 12000, 4, &st), CUDA_ERROR_INVALID_VALUE);
    OK(cuGetProcAddress("cuMemFree", &p, 12000, 0));
    CHECK(p == (void *)cuMemFree_v2, "legacy cuGetProcAddress resolves too");

    /* Call through what came back: this is what the trace must show. */
    PFN_cuMemcpyHtoD_v7000_ptds htod = NULL;
    OK(cuGetProcAddress_v2("cuMemcpyHtoD", (void **)&htod, 12000, PT, NULL));
    CUdeviceptr d;
    OK(cuMemAlloc_v2(&d, 64));
    if (htod)
        OK(htod(d, "ptds", 5));
    CHECK(strcmp((char *)(uintptr_t)d, "ptds") == 0, "the _ptds variant copied");
    OK(cuMemFree_v2(d));
}

static void test_kernels(void)
{
    CUdeviceptr d;
    uint32_t base = 100, out[8] = { 0 };
    unsigned n = 8;
    OK(cuMemAlloc_v2(&d, sizeof(out)));
    void *args[] = { &d, &base, &n };
    CUfunction f = (CUfunction)(void *)k_fill;
    OK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
    OK(cuMemcpyDtoH_v2(out, d, sizeof(out)));
    CHECK(out[0] == 100 && out[7] == 107, "cuLaunchKernel ran the host function on device memory");
    base = 200;
    CUstream s;
    OK(cuStreamCreate(&s, 0));
    OK(cuLaunchKernel_ptsz(f, 2, 1, 1, 1, 1, 1, 0, s, args, NULL));
    CHECK(((uint32_t *)(uintptr_t)d)[3] == 203, "cuLaunchKernel_ptsz too");
    EXPECT(cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuLaunchKernel(f, 0, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
    int calls = 0;
    OK(cuLaunchHostFunc(s, host_fn, &calls));
    CHECK(calls == 1, "cuLaunchHostFunc ran the function");
    OK(cuStreamDestroy_v2(s));
    EXPECT(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL), CUDA_ERROR_INVALID_HANDLE);
    OK(cuMemFree_v2(d));
}

static void test_streams(void)
{
    CUstream s, s2;
    CUevent e1, e2, e3;
    float ms = -1;
    OK(cuStreamCreate(&s, 0));
    EXPECT(cuStreamCreate(&s2, 0x10), CUDA_ERROR_INVALID_VALUE);
    OK(cuStreamCreateWithPriority(&s2, CU_STREAM_NON_BLOCKING, -1));

    double t0 = now_ms();
    OK(cuStreamSynchronize(s));
    double t1 = now_ms();
    OK(cuCtxSynchronize());
    double t2 = now_ms();
    OK(cuStreamSynchronize_ptsz(CU_STREAM_PER_THREAD));
    double t3 = now_ms();
    CHECK(t1 - t0 >= SYNC_DELAY_MS && t2 - t1 >= SYNC_DELAY_MS && t3 - t2 >= SYNC_DELAY_MS,
          "FAKE_CUDA_SYNC_DELAY_MS=%d delays stream and context sync (%.0f/%.0f/%.0f ms)", SYNC_DELAY_MS,
          t1 - t0, t2 - t1, t3 - t2);

    OK(cuEventCreate(&e1, CU_EVENT_DEFAULT));
    OK(cuEventCreate(&e2, CU_EVENT_BLOCKING_SYNC));
    OK(cuEventCreate(&e3, CU_EVENT_DISABLE_TIMING));
    EXPECT(cuEventCreate(&e3, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuEventElapsedTime_v2(&ms, e1, e2), CUDA_ERROR_INVALID_HANDLE);
    OK(cuEventRecord(e1, s));
    OK(cuEventRecord_ptsz(e2, s2));
    OK(cuEventRecord(e3, NULL));
    OK(cuEventSynchronize(e2));
    OK(cuEventQuery(e2));
    OK(cuEventElapsedTime_v2(&ms, e1, e2));
    CHECK(ms == 0.0f, "elapsed time is 0");
    OK(cuEventElapsedTime(&ms, e1, e2));
    EXPECT(cuEventElapsedTime_v2(&ms, e1, e3), CUDA_ERROR_INVALID_HANDLE);
    OK(cuEventDestroy_v2(e1));
    EXPECT(cuEventQuery(e1), CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuEventRecord(e2, (CUstream)&ms), CUDA_ERROR_INVALID_HANDLE); /* not a stream */
    OK(cuEventDestroy(e2));
    OK(cuEventDestroy_v2(e3));

    OK(cuStreamDestroy_v2(s));
    EXPECT(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
    char buf[4];
    EXPECT(cuMemcpyHtoDAsync_v2(0, buf, 4, s), CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuStreamDestroy_v2(s), CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuStreamDestroy_v2(NULL), CUDA_ERROR_INVALID_HANDLE);
    OK(cuStreamDestroy(s2));
}

#define THREADS 8
#define ITERS 200

static void *thread_work(void *arg)
{
    int *errors = arg;
    CUmemAllocationProp prop = vmm_prop(0);
    char buf[128];
    if (cuCtxSetCurrent(g_prim0) != CUDA_SUCCESS)
        (*errors)++;
    for (int i = 0; i < ITERS; i++) {
        CUdeviceptr d;
        CUmemGenericAllocationHandle h;
        if (cuMemAlloc_v2(&d, 4096) != CUDA_SUCCESS) {
            (*errors)++;
            continue;
        }
        memset(buf, i, sizeof(buf));
        if (cuMemcpyHtoD_v2(d, buf, sizeof(buf)) != CUDA_SUCCESS || cuMemFree_v2(d) != CUDA_SUCCESS)
            (*errors)++;
        if (cuMemCreate(&h, GRAN, &prop, 0) != CUDA_SUCCESS || cuMemRelease(h) != CUDA_SUCCESS)
            (*errors)++;
    }
    return NULL;
}

static void test_threads(void)
{
    pthread_t t[THREADS];
    int errors[THREADS] = { 0 };
    size_t before = free_mem();
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, thread_work, &errors[i]);
    int total = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        total += errors[i];
    }
    CHECK(total == 0, "%d threads x %d alloc/copy/free + create/release: %d errors", THREADS, ITERS, total);
    CHECK(free_mem() == before, "accounting is back where it was");
}

static void test_errors(void)
{
    const char *s = NULL;
    OK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
    CHECK(s && strcmp(s, "out of memory") == 0, "cuGetErrorString(OUT_OF_MEMORY) is \"%s\"", s ? s : "(null)");
    s = "x";
    EXPECT(cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
    CHECK(s == NULL, "unknown code: NULL");
}

/* ---- process checkpoint ------------------------------------------------------- */

/* Forked before the parent's first driver call, so that each reads its own
 * environment: a child that checks the default state directory (and exits),
 * and the FAKE_CUDA_CKPT_BLOCK=1 target of test_ckpt_block, which waits for
 * g_blk->go. */
static void ckpt_start_children(void)
{
    pid_t parent = getpid();
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        /* The default directory, created 0700, with the controller's view
         * of its parent. */
        die_with_parent(parent);
        unsetenv("FAKE_CUDA_CKPT_DIR");
        unsetenv("FAKE_CUDA_TRACE");
        unsetenv("FAKE_CUDA_FAIL");
        char dir[64], path[96], buf[64];
        snprintf(dir, sizeof(dir), "/tmp/fake-cuda-ckpt-%u", (unsigned)getuid());
        snprintf(path, sizeof(path), "%s/%d", dir, (int)parent);
        struct stat sb;
        int existed = stat(dir, &sb) == 0;
        if (cuInit(0) != CUDA_SUCCESS)
            _exit(10);
        if (cuCheckpointProcessLock(parent, NULL) != CUDA_SUCCESS)
            _exit(11);
        if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode) || (!existed && (sb.st_mode & 0777) != 0700))
            _exit(12);
        const char *c = slurp(path, buf, sizeof(buf));
        if (!c || strcmp(c, "locked\n") != 0)
            _exit(13);
        if (cuCheckpointProcessUnlock(parent, NULL) != CUDA_SUCCESS || access(path, F_OK) == 0)
            _exit(14);
        if (!existed) {
            char lock[96];
            snprintf(lock, sizeof(lock), "%s/.lock", dir);
            unlink(lock);
            rmdir(dir);
        }
        _exit(0);
    }
    g_default_dir_status = reap(pid, 2000);

    g_blk = mmap(NULL, sizeof(*g_blk), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_blk == MAP_FAILED) {
        g_blk = NULL;
        return;
    }
    g_blk_pid = fork();
    if (g_blk_pid == 0) {
        die_with_parent(parent);
        setenv("FAKE_CUDA_CKPT_BLOCK", "1", 1);
        unsetenv("FAKE_CUDA_TRACE");
        unsetenv("FAKE_CUDA_FAIL");
        while (!atomic_load(&g_blk->go))
            sleep_ms(1);
        if (cuInit(0) != CUDA_SUCCESS)
            atomic_fetch_add(&g_blk->bad, 1);
        while (!atomic_load(&g_blk->stop)) {
            int n = 0;
            if (cuDeviceGetCount(&n) != CUDA_SUCCESS || n != 2)
                atomic_fetch_add(&g_blk->bad, 1);
            atomic_fetch_add(&g_blk->calls, 1);
        }
        _exit(atomic_load(&g_blk->bad) ? 1 : 0);
    }
}

static int ckpt_state(pid_t pid)
{
    CUprocessState st = (CUprocessState)99;
    CUresult r = cuCheckpointProcessGetState(pid, &st);
    return r == CUDA_SUCCESS ? (int)st : -(int)r;
}

#define UUID0 "46414b45000000000000000000000000"
#define UUID1 "46414b45010000000000000000000000"

static void test_ckpt(void)
{
    char path[sizeof(g_ckpt_dir) + 16], buf[512];
    const char *c;
    struct stat sb;
    pid_t parent = getpid();
    fflush(stdout);
    pid_t t = fork();
    if (t == 0) {
        die_with_parent(parent);
        for (;;)
            pause();
    }
    snprintf(path, sizeof(path), "%s/%d", g_ckpt_dir, (int)t);

    CHECK(WIFEXITED(g_default_dir_status) && WEXITSTATUS(g_default_dir_status) == 0,
          "default FAKE_CUDA_CKPT_DIR: /tmp/fake-cuda-ckpt-<uid>, 0700, \"locked\\n\", removed on unlock "
          "(child status %d)", g_default_dir_status);

    /* cuGetProcAddress knows them, from 12080. */
    void *p = NULL;
    CUdriverProcAddressQueryResult qs;
    OK(cuGetProcAddress_v2("cuCheckpointProcessRestore", &p, 13000, 0, &qs));
    CHECK(p == (void *)cuCheckpointProcessRestore, "cuGetProcAddress resolves cuCheckpointProcessRestore");
    OK(cuGetProcAddress_v2("cuCheckpointProcessGetRestoreThreadId", &p, 12080, 0, &qs));
    CHECK(p == (void *)cuCheckpointProcessGetRestoreThreadId, "and cuCheckpointProcessGetRestoreThreadId");
    EXPECT(cuGetProcAddress_v2("cuCheckpointProcessLock", &p, 12070, 0, &qs), CUDA_ERROR_NOT_FOUND);
    CHECK(qs == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, "cuCheckpointProcessLock needs 12080");

    /* RUNNING: no file, and only lock is legal. */
    CHECK(ckpt_state(t) == CU_PROCESS_STATE_RUNNING && access(path, F_OK) != 0, "a new process is RUNNING, no state file");
    memset(&sb, 0, sizeof(sb));
    int st_ok = stat(g_ckpt_dir, &sb) == 0;
    CHECK(st_ok && S_ISDIR(sb.st_mode) && (sb.st_mode & 0777) == 0700,
          "FAKE_CUDA_CKPT_DIR created, mode 0700 (%o)", (unsigned)(sb.st_mode & 0777));
    EXPECT(cuCheckpointProcessGetState(t, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuCheckpointProcessCheckpoint(t, NULL), CUDA_ERROR_ILLEGAL_STATE);
    EXPECT(cuCheckpointProcessRestore(t, NULL), CUDA_ERROR_ILLEGAL_STATE);
    EXPECT(cuCheckpointProcessUnlock(t, NULL), CUDA_ERROR_ILLEGAL_STATE);

    /* FAKE_CUDA_FAIL=cuCheckpointProcessLock:1 */
    EXPECT(cuCheckpointProcessLock(t, NULL), CUDA_ERROR_UNKNOWN);
    CHECK(ckpt_state(t) == CU_PROCESS_STATE_RUNNING && access(path, F_OK) != 0,
          "the injected lock failure had no side effect");

    CUcheckpointLockArgs la;
    memset(&la, 0, sizeof(la));
    la.reserved0 = 1;
    EXPECT(cuCheckpointProcessLock(t, &la), CUDA_ERROR_INVALID_VALUE);
    la.reserved0 = 0;
    la.reserved1[6] = 1;
    EXPECT(cuCheckpointProcessLock(t, &la), CUDA_ERROR_INVALID_VALUE);
    CHECK(ckpt_state(t) == CU_PROCESS_STATE_RUNNING, "nonzero reserved lock args: still RUNNING");
    memset(&la, 0, sizeof(la));
    la.timeoutMs = 5000;
    OK(cuCheckpointProcessLock(t, &la));
    CHECK(ckpt_state(t) == CU_PROCESS_STATE_LOCKED, "lock: LOCKED");
    c = slurp(path, buf, sizeof(buf));
    CHECK(c && strcmp(c, "locked\n") == 0, "state file reads \"locked\\n\"");

    /* LOCKED: only checkpoint and unlock. */
    EXPECT(cuCheckpointProcessLock(t, NULL), CUDA_ERROR_ILLEGAL_STATE);
    EXPECT(cuCheckpointProcessRestore(t, NULL), CUDA_ERROR_ILLEGAL_STATE);
    CUcheckpointCheckpointArgs ca;
    memset(&ca, 0, sizeof(ca));
    ca.reserved[7] = 1;
    EXPECT(cuCheckpointProcessCheckpoint(t, &ca), CUDA_ERROR_INVALID_VALUE);
    CHECK(ckpt_state(t) == CU_PROCESS_STATE_LOCKED, "nonzero reserved checkpoint args: still LOCKED");
    memset(&ca, 0, sizeof(ca));
    OK(cuCheckpointProcessCheckpoint(t, &ca));
    CHECK(ckpt_state(t) == CU_PROCESS_STATE_CHECKPOINTED, "checkpoint: CHECKPOINTED");
    c = slurp(path, buf, sizeof(buf));
    CHECK(c && strcmp(c, "checkpointed\n") == 0, "state file reads \"checkpointed\\n\"");

    /* CHECKPOINTED: only restore. */
    EXPECT(cuCheckpointProcessLock(t, NULL), CUDA_ERROR_ILLEGAL_STATE);
    EXPECT(cuCheckpointProcessCheckpoint(t, NULL), CUDA_ERROR_ILLEGAL_STATE);
    EXPECT(cuCheckpointProcessUnlock(t, NULL), CUDA_ERROR_ILLEGAL_STATE);

    /* gpuPairs must be a permutation of both devices. */
    CUuuid u0, u1, bogus;
    OK(cuDeviceGetUuid_v2(&u0, 0));
    OK(cuDeviceGetUuid_v2(&u1, 1));
    bogus = u1;
    bogus.bytes[4] = 2; /* device 2 does not exist */
    CUcheckpointGpuPair one[1] = { { u0, u1 } };
    CUcheckpointGpuPair dup_old[2] = { { u0, u1 }, { u0, u0 } };
    CUcheckpointGpuPair dup_new[2] = { { u0, u1 }, { u1, u1 } };
    CUcheckpointGpuPair unknown[2] = { { u0, u1 }, { bogus, u0 } };
    CUcheckpointGpuPair three[3] = { { u0, u1 }, { u1, u0 }, { u1, u0 } };
    CUcheckpointGpuPair swap[2] = { { u0, u1 }, { u1, u0 } };
    struct {
        CUcheckpointGpuPair *pairs;
        unsigned n;
        const char *what;
    } bad[] = {
        { one, 1, "one pair of two devices" },
        { dup_old, 2, "a device twice as old" },
        { dup_new, 2, "a device twice as new" },
        { unknown, 2, "an unknown UUID" },
        { three, 3, "three pairs for two devices" },
        { NULL, 2, "gpuPairs NULL with a count" },
    };
    CUcheckpointRestoreArgs ra;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&ra, 0, sizeof(ra));
        ra.gpuPairs = bad[i].pairs;
        ra.gpuPairsCount = bad[i].n;
        CUresult r = cuCheckpointProcessRestore(t, &ra);
        CHECK(r == CUDA_ERROR_INVALID_VALUE && ckpt_state(t) == CU_PROCESS_STATE_CHECKPOINTED,
              "restore with %s: CUDA_ERROR_INVALID_VALUE (%s), stays CHECKPOINTED", bad[i].what, rc_name(r));
    }
    memset(&ra, 0, sizeof(ra));
    ra.gpuPairs = swap;
    ra.gpuPairsCount = 2;
    ra.reserved[0] = 1;
    EXPECT(cuCheckpointProcessRestore(t, &ra), CUDA_ERROR_INVALID_VALUE);
    ra.reserved[0] = 0;
    ra.reserved1 = 1;
    EXPECT(cuCheckpointProcessRestore(t, &ra), CUDA_ERROR_INVALID_VALUE);
    c = slurp(path, buf, sizeof(buf));
    CHECK(ckpt_state(t) == CU_PROCESS_STATE_CHECKPOINTED && c && strcmp(c, "checkpointed\n") == 0,
          "refused restores left the state file alone");
    ra.reserved1 = 0;
    OK(cuCheckpointProcessRestore(t, &ra));
    CHECK(ckpt_state(t) == CU_PROCESS_STATE_LOCKED, "restore with the swap permutation: LOCKED");
    c = slurp(path, buf, sizeof(buf));
    CHECK(c && strcmp(c, "locked\npairs " UUID0 ":" UUID1 " " UUID1 ":" UUID0 "\n") == 0,
          "state file records the pairs as \"locked\\npairs OLD:NEW OLD:NEW\\n\"");

    /* LOCKED after restore: unlock. */
    CUcheckpointUnlockArgs ua;
    memset(&ua, 0, sizeof(ua));
    ua.reserved[3] = 1;
    EXPECT(cuCheckpointProcessUnlock(t, &ua), CUDA_ERROR_INVALID_VALUE);
    CHECK(ckpt_state(t) == CU_PROCESS_STATE_LOCKED, "nonzero reserved unlock args: still LOCKED");
    memset(&ua, 0, sizeof(ua));
    OK(cuCheckpointProcessUnlock(t, &ua));
    CHECK(ckpt_state(t) == CU_PROCESS_STATE_RUNNING && access(path, F_OK) != 0, "unlock: RUNNING, file gone");

    /* In place (no pairs), then the identity permutation in another order. */
    OK(cuCheckpointProcessLock(t, NULL));
    OK(cuCheckpointProcessCheckpoint(t, NULL));
    memset(&ra, 0, sizeof(ra));
    OK(cuCheckpointProcessRestore(t, &ra));
    c = slurp(path, buf, sizeof(buf));
    CHECK(c && strcmp(c, "locked\npairs\n") == 0, "restore in place records \"pairs\" alone");
    OK(cuCheckpointProcessCheckpoint(t, NULL));
    CUcheckpointGpuPair ident[2] = { { u1, u1 }, { u0, u0 } };
    ra.gpuPairs = ident;
    ra.gpuPairsCount = 2;
    OK(cuCheckpointProcessRestore(t, &ra));
    c = slurp(path, buf, sizeof(buf));
    CHECK(c && strcmp(c, "locked\npairs " UUID1 ":" UUID1 " " UUID0 ":" UUID0 "\n") == 0,
          "checkpoint again, restore with the identity: pairs in the order given");
    OK(cuCheckpointProcessUnlock(t, NULL));

    int tid = -1;
    EXPECT(cuCheckpointProcessGetRestoreThreadId(t, &tid), CUDA_ERROR_NOT_SUPPORTED);
    EXPECT(cuCheckpointProcessGetRestoreThreadId(t, NULL), CUDA_ERROR_INVALID_VALUE);

    /* Blocking is opt-in: this process has no FAKE_CUDA_CKPT_BLOCK. */
    int n = 0;
    OK(cuCheckpointProcessLock(getpid(), NULL));
    OK(cuDeviceGetCount(&n));
    OK(cuCheckpointProcessUnlock(getpid(), NULL));

    /* A dead (reaped) pid, with a stale state file left behind. */
    kill(t, SIGKILL);
    waitpid(t, NULL, 0);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("locked\n", f);
        fclose(f);
    }
    CUprocessState st;
    EXPECT(cuCheckpointProcessGetState(t, &st), CUDA_ERROR_INVALID_VALUE);
    CHECK(access(path, F_OK) != 0, "the stale state file of a dead pid is removed");
    EXPECT(cuCheckpointProcessLock(t, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuCheckpointProcessCheckpoint(t, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuCheckpointProcessRestore(t, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuCheckpointProcessUnlock(t, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuCheckpointProcessGetRestoreThreadId(t, &tid), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuCheckpointProcessLock(0, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuCheckpointProcessLock(-1, NULL), CUDA_ERROR_INVALID_VALUE);
}

/* Waits up to ms for the blocking child's call count to pass min. */
static unsigned long wait_calls(unsigned long min, unsigned ms)
{
    for (unsigned i = 0; i < ms && atomic_load(&g_blk->calls) <= min; i++)
        sleep_ms(1);
    return atomic_load(&g_blk->calls);
}

/* FAKE_CUDA_CKPT_BLOCK=1: the target's calls wait while it is LOCKED or
 * CHECKPOINTED, and go on after unlock. */
static void test_ckpt_block(void)
{
    if (!g_blk || g_blk_pid <= 0) {
        CHECK(0, "FAKE_CUDA_CKPT_BLOCK child started");
        return;
    }
    pid_t t = g_blk_pid;
    atomic_store(&g_blk->go, 1);
    unsigned long c0 = wait_calls(100, 2000);
    CHECK(c0 > 100, "the target is calling cuDeviceGetCount (%lu calls)", c0);
    OK(cuCheckpointProcessLock(t, NULL));
    sleep_ms(10); /* a call already past the check may still finish */
    unsigned long c1 = atomic_load(&g_blk->calls);
    sleep_ms(60);
    unsigned long c2 = atomic_load(&g_blk->calls);
    CHECK(c2 == c1, "while LOCKED the target's call count stays put (%lu -> %lu)", c1, c2);
    OK(cuCheckpointProcessCheckpoint(t, NULL));
    sleep_ms(30);
    unsigned long c3 = atomic_load(&g_blk->calls);
    CHECK(c3 == c1, "and while CHECKPOINTED (%lu)", c3);
    OK(cuCheckpointProcessRestore(t, NULL));
    sleep_ms(30);
    unsigned long c4 = atomic_load(&g_blk->calls);
    CHECK(c4 == c1, "and while LOCKED again after restore (%lu)", c4);
    double t0 = now_ms();
    OK(cuCheckpointProcessUnlock(t, NULL));
    unsigned long c5 = wait_calls(c1, 2000);
    CHECK(c5 > c1, "after unlock the calls go on (%lu, %.1f ms)", c5, now_ms() - t0);
    atomic_store(&g_blk->stop, 1);
    int status = reap(t, 2000);
    g_blk_pid = -1;
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0 && atomic_load(&g_blk->bad) == 0,
          "every call of the blocked target succeeded (status %d, bad %d)", status, atomic_load(&g_blk->bad));
}

/* Only the writers' lock file is left: every unlock removed its file. */
static void ckpt_cleanup(void)
{
    int others = 0;
    DIR *d = opendir(g_ckpt_dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        others += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 && strcmp(e->d_name, ".lock") != 0;
    if (d)
        closedir(d);
    CHECK(d && others == 0, "state directory holds nothing but .lock (%d other entries)", others);
    char lock[sizeof(g_ckpt_dir) + 8];
    snprintf(lock, sizeof(lock), "%s/.lock", g_ckpt_dir);
    unlink(lock);
    rmdir(g_ckpt_dir);
    rmdir(g_ckpt_root);
}

/* FAKE_CUDA_TRACE: one line per call, under the exported name. */
static void test_trace(void)
{
    FILE *f = fopen(g_trace_path, "r");
    char line[128];
    int init = 0, ptds = 0, query = 0, create = 0, dtoh_async = 0, lock = 0;
    while (f && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        init += strcmp(line, "cuInit") == 0;
        ptds += strcmp(line, "cuMemcpyHtoD_v2_ptds") == 0;
        query += strcmp(line, "cuStreamQuery") == 0;
        create += strcmp(line, "cuMemCreate") == 0;
        dtoh_async += strcmp(line, "cuMemcpyDtoHAsync_v2") == 0;
        lock += strcmp(line, "cuCheckpointProcessLock") == 0;
    }
    if (f)
        fclose(f);
    CHECK(init == 2, "trace has both cuInit calls (%d)", init);
    CHECK(ptds == 1, "trace shows the call made through cuGetProcAddress as cuMemcpyHtoD_v2_ptds (%d)", ptds);
    CHECK(query == 3, "trace counts cuStreamQuery calls, failed one included (%d)", query);
    CHECK(dtoh_async == 2, "cuMemcpyDtoHAsync_v2 traced under its own name (%d)", dtoh_async);
    CHECK(create > 3 * THREADS, "cuMemCreate calls from all threads traced (%d)", create);
    CHECK(lock == 12, "cuCheckpointProcessLock calls traced, failed ones included (%d)", lock);
}

int main(void)
{
    int fd = mkstemp(g_trace_path);
    if (fd >= 0)
        close(fd);
    if (pipe(g_pipe) != 0) {
        perror("pipe");
        return 2;
    }
    setenv("FAKE_CUDA_DEVICES", "2", 1);
    setenv("FAKE_CUDA_MEM_MB", "64", 1);
    setenv("FAKE_CUDA_SYNC_DELAY_MS", "40", 1);
    setenv("FAKE_CUDA_FAIL", "cuMemCreate:3,cuMemcpyDtoHAsync_v2:1,cuStreamQuery:2,cuCheckpointProcessLock:1", 1);
    setenv("FAKE_CUDA_TRACE", g_trace_path, 1);
    unsetenv("FAKE_CUDA_NO_DEVICE");
    unsetenv("FAKE_CUDA_CKPT_BLOCK");
    if (!mkdtemp(g_ckpt_root)) {
        perror("mkdtemp");
        return 2;
    }
    snprintf(g_ckpt_dir, sizeof(g_ckpt_dir), "%s/state", g_ckpt_root);
    setenv("FAKE_CUDA_CKPT_DIR", g_ckpt_dir, 1);

    test_no_device();
    ckpt_start_children();
    test_preinit();
    OK(cuInit(0));
    test_devices();
    test_contexts();
    test_fail_injection();
    test_accounting();
    test_classic();
    test_hostreg();
    test_vmm();
    test_proc();
    test_kernels();
    test_streams();
    test_threads();
    test_errors();
    test_ckpt();
    test_ckpt_block();
    ckpt_cleanup();
    test_trace();

    unlink(g_trace_path);
    printf("%d passed, %d failed\n", g_passed, g_failed);
    return g_failed ? 1 : 0;
}
