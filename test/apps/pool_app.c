/* CPU test application for the end-to-end tests: a CUDA driver-API program
 * run against the fake libcuda (test/fake-cuda), where device memory is host
 * memory at the same address, so a "kernel" is a host function launched with
 * cuLaunchKernel.
 *
 * Built twice: linked with -lcuda (the shim's exported symbols catch the
 * calls), and with -DUSE_PROC_ADDRESS, where it dlopens libcuda.so.1 and
 * takes every entry point from cuGetProcAddress_v2 as cudart does (the
 * shim's dlsym and cuGetProcAddress hooks catch them).
 *
 * It speaks the sample-application protocol (cli/demo/demo_app.cu): commands
 * on stdin, one JSON line per answer on stdout. Extra commands for tests:
 *   info         address-range queries on interior pointers, cuMemGetInfo,
 *                the context's stack limit
 *   churn N      N alloc/free cycles of assorted sizes
 *   threads N    N threads allocating, launching, copying, freeing
 *   stop         stop them; reports iterations and errors
 *   managed      allocate 1 MiB of managed memory (outside the pool)
 *   alloc N      allocate N more bytes in the pool and keep them
 *   rewrite      a thread rewrites the 40 MiB buffer whole, again and again
 *                (each time one launch: a pause finds it whole)
 *   rewritten    stop it; which rewrite the buffer holds, and whether whole
 *   fds-left N   open /dev/null until no fd is left, then close N of them:
 *                an application short of fds
 *   zero N       the first N percent of every buffer set to zeros: what a
 *                checkpoint or a suspend leaves on the GPU
 *   fork         a child that never uses CUDA and waits (a DataLoader worker)
 *   spawn        this program again as a child, under the shim it inherits:
 *                a second CUDA process in the job
 *   log PATH     PATH opened write-only, truncated (a `>` redirection); then
 *   logline      one more line written to it
 *   rwfile PATH  PATH opened read-write
 *   tcp-listen   a TCP socket listening on 127.0.0.1 (any port)
 *   tcp-connect PORT  a TCP connection to 127.0.0.1:PORT
 *   unix-connect PATH a Unix stream connection to PATH
 * Environment: APP_DEVICES=n buffers on n devices (default 1).
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <inttypes.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static struct {
    PFN_cuInit_v2000 init;
    PFN_cuDeviceGetCount_v2000 device_count;
    PFN_cuDevicePrimaryCtxRetain_v7000 retain;
    PFN_cuCtxSetCurrent_v4000 set_current;
    PFN_cuMemAlloc_v3020 alloc;
    PFN_cuMemFree_v3020 free;
    PFN_cuMemAllocPitch_v3020 alloc_pitch;
    PFN_cuMemcpyDtoH_v3020 dtoh;
    PFN_cuLaunchKernel_v4000 launch;
    PFN_cuMemGetAddressRange_v3020 range;
    PFN_cuPointerGetAttribute_v4000 attribute;
    PFN_cuMemGetInfo_v3020 info;
    PFN_cuMemAllocManaged_v6000 alloc_managed;
    PFN_cuCtxSynchronize_v2000 sync;
    PFN_cuCtxGetLimit_v3010 get_limit;
} cu;

static void die(const char *what, CUresult r)
{
    fprintf(stderr, "pool_app: %s failed: CUresult %d\n", what, (int)r);
    exit(2);
}

#define CHECK(call, what)            \
    do {                             \
        CUresult r_ = (call);        \
        if (r_ != CUDA_SUCCESS)      \
            die(what, r_);           \
    } while (0)

#ifdef USE_PROC_ADDRESS
static void load_api(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "pool_app: %s\n", dlerror());
        exit(2);
    }
    PFN_cuGetProcAddress_v12000 gpa = (PFN_cuGetProcAddress_v12000)dlsym(h, "cuGetProcAddress_v2");
    if (!gpa) {
        fprintf(stderr, "pool_app: no cuGetProcAddress_v2\n");
        exit(2);
    }
    CUdriverProcAddressQueryResult st;
#define GET(field, name, flags) CHECK(gpa(name, (void **)&cu.field, 12000, flags, &st), "cuGetProcAddress " name)
    GET(init, "cuInit", CU_GET_PROC_ADDRESS_DEFAULT);
    GET(device_count, "cuDeviceGetCount", CU_GET_PROC_ADDRESS_DEFAULT);
    GET(retain, "cuDevicePrimaryCtxRetain", CU_GET_PROC_ADDRESS_DEFAULT);
    GET(set_current, "cuCtxSetCurrent", CU_GET_PROC_ADDRESS_DEFAULT);
    GET(alloc, "cuMemAlloc", CU_GET_PROC_ADDRESS_DEFAULT);
    GET(free, "cuMemFree", CU_GET_PROC_ADDRESS_DEFAULT);
    GET(alloc_pitch, "cuMemAllocPitch", CU_GET_PROC_ADDRESS_DEFAULT);
    /* Per-thread default stream variants, as nvcc --default-stream per-thread asks. */
    GET(dtoh, "cuMemcpyDtoH", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    GET(launch, "cuLaunchKernel", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    GET(range, "cuMemGetAddressRange", CU_GET_PROC_ADDRESS_DEFAULT);
    GET(attribute, "cuPointerGetAttribute", CU_GET_PROC_ADDRESS_DEFAULT);
    GET(info, "cuMemGetInfo", CU_GET_PROC_ADDRESS_DEFAULT);
    GET(alloc_managed, "cuMemAllocManaged", CU_GET_PROC_ADDRESS_DEFAULT);
    GET(sync, "cuCtxSynchronize", CU_GET_PROC_ADDRESS_DEFAULT);
    GET(get_limit, "cuCtxGetLimit", CU_GET_PROC_ADDRESS_DEFAULT);
#undef GET
}
#else
static void load_api(void)
{
    cu.init = cuInit;
    cu.device_count = cuDeviceGetCount;
    cu.retain = cuDevicePrimaryCtxRetain;
    cu.set_current = cuCtxSetCurrent;
    cu.alloc = cuMemAlloc;
    cu.free = cuMemFree;
    cu.alloc_pitch = cuMemAllocPitch;
    cu.dtoh = cuMemcpyDtoH;
    cu.launch = cuLaunchKernel;
    cu.range = cuMemGetAddressRange;
    cu.attribute = cuPointerGetAttribute;
    cu.info = cuMemGetInfo;
    cu.alloc_managed = cuMemAllocManaged;
    cu.sync = cuCtxSynchronize;
    cu.get_limit = cuCtxGetLimit;
}
#endif

/* The "kernel": in the fake driver a CUfunction is a host function. */
static void fill_kernel(void **params)
{
    uint64_t *p = (uint64_t *)(uintptr_t) * (CUdeviceptr *)params[0];
    size_t words = *(size_t *)params[1] / 8;
    uint64_t x = *(uint64_t *)params[2] * 2 + 1; /* odd, distinct per seed */
    for (size_t i = 0; i < words; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = x;
    }
}

static void zero_kernel(void **params)
{
    memset((void *)(uintptr_t) * (CUdeviceptr *)params[0], 0, *(size_t *)params[1]);
}

static void launch_zero(CUdeviceptr ptr, size_t size)
{
    void *params[] = { &ptr, &size };
    CHECK(cu.launch((CUfunction)(void *)zero_kernel, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), "cuLaunchKernel");
}

static void launch_fill(CUdeviceptr ptr, size_t size, uint64_t seed)
{
    void *params[] = { &ptr, &size, &seed };
    CHECK(cu.launch((CUfunction)(void *)fill_kernel, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), "cuLaunchKernel");
}

static uint64_t checksum(CUdeviceptr ptr, size_t size)
{
    uint8_t *host = malloc(size);
    CHECK(cu.dtoh(host, ptr, size), "cuMemcpyDtoH");
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < size; i++)
        h = (h ^ host[i]) * 0x100000001b3ull;
    free(host);
    return h;
}

#define NBUF 4
static const size_t sizes[NBUF] = { 1u << 20, (3u << 20) + 512, 40u << 20, 4096 };
static struct {
    int device;
    CUdeviceptr ptr;
    size_t size;
} bufs[2 * NBUF];
static int nbufs;
static CUcontext ctxs[8];
static int generation;

static void use_device(int d)
{
    CHECK(cu.set_current(ctxs[d]), "cuCtxSetCurrent");
}

static void print_buffers(const char *event)
{
    printf("{\"event\":\"%s\",\"pid\":%d,\"buffers\":[", event, (int)getpid());
    for (int i = 0; i < nbufs; i++) {
        use_device(bufs[i].device);
        printf("%s{\"device\":%d,\"addr\":\"0x%llx\",\"size\":%zu,\"checksum\":\"%016" PRIx64 "\"}", i ? "," : "",
               bufs[i].device, (unsigned long long)bufs[i].ptr, bufs[i].size, checksum(bufs[i].ptr, bufs[i].size));
    }
    printf("]}\n");
    fflush(stdout);
}

static void fill_all(void)
{
    for (int i = 0; i < nbufs; i++) {
        use_device(bufs[i].device);
        launch_fill(bufs[i].ptr, bufs[i].size, 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1) + (uint64_t)generation);
    }
}

static void cmd_info(void)
{
    use_device(0);
    printf("{\"event\":\"info\",\"ranges\":[");
    for (int i = 0; i < nbufs; i++) {
        use_device(bufs[i].device);
        CUdeviceptr base = 0, start = 0;
        size_t size = 0;
        CUdeviceptr interior = bufs[i].ptr + bufs[i].size / 2;
        CUresult r1 = cu.range(&base, &size, interior);
        CUresult r2 = cu.attribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, interior);
        printf("%s{\"addr\":\"0x%llx\",\"base\":\"0x%llx\",\"size\":%zu,\"start\":\"0x%llx\",\"r\":[%d,%d]}", i ? "," : "",
               (unsigned long long)bufs[i].ptr, (unsigned long long)base, size, (unsigned long long)start, (int)r1,
               (int)r2);
    }
    use_device(0);
    size_t free_b = 0, total_b = 0;
    CHECK(cu.info(&free_b, &total_b), "cuMemGetInfo");
    size_t pitch = 0;
    CUdeviceptr pitched = 0;
    CHECK(cu.alloc_pitch(&pitched, &pitch, 1000, 10, 4), "cuMemAllocPitch");
    CHECK(cu.free(pitched), "cuMemFree (pitched)");
    size_t stack = 0;
    CHECK(cu.get_limit(&stack, CU_LIMIT_STACK_SIZE), "cuCtxGetLimit");
    printf("],\"free\":%zu,\"total\":%zu,\"pitch\":%zu,\"pitched\":\"0x%llx\",\"stack\":%zu}\n", free_b, total_b,
           pitch, (unsigned long long)pitched, stack);
    fflush(stdout);
}

static void cmd_churn(int n)
{
    use_device(0);
    unsigned seed = 7;
    CUdeviceptr last = 0;
    for (int i = 0; i < n; i++) {
        size_t size = 512 + (size_t)(rand_r(&seed) % (8 << 20));
        CUdeviceptr p;
        CHECK(cu.alloc(&p, size), "cuMemAlloc (churn)");
        last = p;
        CHECK(cu.free(p), "cuMemFree (churn)");
    }
    printf("{\"event\":\"churned\",\"count\":%d,\"last\":\"0x%llx\"}\n", n, (unsigned long long)last);
    fflush(stdout);
}

/* ---- worker threads: allocate, launch, copy back, verify, free ---- */

static atomic_int stop_workers;
static atomic_long iterations, errors;
static pthread_t workers[16];
static int nworkers;

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    CHECK(cu.set_current(ctxs[0]), "cuCtxSetCurrent (worker)");
    uint64_t seed = 0x1234567ull * (uint64_t)(id + 1);
    uint64_t *host = malloc(20 << 12); /* the largest size below */
    while (!atomic_load(&stop_workers)) {
        size_t size = (size_t)(4 + (seed % 16)) << 12;
        CUdeviceptr p;
        CHECK(cu.alloc(&p, size), "cuMemAlloc (worker)");
        launch_fill(p, size, seed);
        CHECK(cu.dtoh(host, p, size), "cuMemcpyDtoH (worker)");
        uint64_t x = seed * 2 + 1;
        for (size_t i = 0; i < size / 8; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if (host[i] != x) {
                atomic_fetch_add(&errors, 1);
                break;
            }
        }
        CHECK(cu.free(p), "cuMemFree (worker)");
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        atomic_fetch_add(&iterations, 1);
    }
    free(host);
    return NULL;
}

static void cmd_threads(int n)
{
    atomic_store(&stop_workers, 0);
    for (nworkers = 0; nworkers < n && nworkers < 16; nworkers++)
        pthread_create(&workers[nworkers], NULL, worker, (void *)(intptr_t)nworkers);
    printf("{\"event\":\"threads\",\"count\":%d}\n", nworkers);
    fflush(stdout);
}

static void cmd_stop(void)
{
    atomic_store(&stop_workers, 1);
    for (int i = 0; i < nworkers; i++)
        pthread_join(workers[i], NULL);
    nworkers = 0;
    printf("{\"event\":\"stopped\",\"iterations\":%ld,\"errors\":%ld}\n", atomic_load(&iterations),
           atomic_load(&errors));
    fflush(stdout);
}

/* ---- rewriter: one buffer rewritten whole, again and again, while a live
 * checkpoint copies it: whatever the image holds of it must be one rewrite,
 * whole, never a torn mix of two. ---- */

#define REWRITTEN 2 /* the 40 MiB buffer */
static atomic_int stop_rewriter;
static atomic_long rewrites;
static pthread_t rewriter_thread;
static int rewriting;

static uint64_t rewrite_seed(long k)
{
    return 0xA5A5A5A5A5ull + (uint64_t)k;
}

static void *rewriter(void *arg)
{
    (void)arg;
    CHECK(cu.set_current(ctxs[0]), "cuCtxSetCurrent (rewriter)");
    for (long k = 1; !atomic_load(&stop_rewriter); k++) {
        launch_fill(bufs[REWRITTEN].ptr, bufs[REWRITTEN].size, rewrite_seed(k));
        atomic_store(&rewrites, k);
    }
    return NULL;
}

/* Which rewrite (1..last) the buffer holds, 0 if none, and whether it holds
 * all of it. */
static void cmd_rewritten(void)
{
    if (rewriting) {
        atomic_store(&stop_rewriter, 1);
        pthread_join(rewriter_thread, NULL);
        rewriting = 0;
    }
    use_device(bufs[REWRITTEN].device);
    size_t words = bufs[REWRITTEN].size / 8;
    uint64_t *host = malloc(words * 8);
    CHECK(cu.dtoh(host, bufs[REWRITTEN].ptr, words * 8), "cuMemcpyDtoH (rewritten)");
    long last = atomic_load(&rewrites), holds = 0;
    int whole = 0;
    for (long k = last; k >= 1 && !holds; k--) {
        uint64_t x = rewrite_seed(k) * 2 + 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if (host[0] != x)
            continue;
        holds = k;
        whole = 1;
        for (size_t i = 1; i < words && whole; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            whole = host[i] == x;
        }
    }
    free(host);
    printf("{\"event\":\"rewritten\",\"count\":%ld,\"holds\":%ld,\"whole\":%s}\n", last, holds, whole ? "true" : "false");
    fflush(stdout);
}

static int log_fd = -1, log_lines;

/* A child for the process-tree tests: forked (it waits, never using CUDA),
 * or this program again (spawn: it starts CUDA under the shim it inherits,
 * and waits on a pipe only this process writes to). */
static void cmd_child(bool spawn)
{
    int in[2];
    if (pipe(in))
        in[0] = in[1] = -1;
    pid_t child = fork();
    if (child == 0) {
        if (!spawn) {
            for (;;)
                pause();
        }
        dup2(in[0], 0);
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        char self[4096];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        self[n > 0 ? n : 0] = 0;
        execl(self, self, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    printf("{\"event\":\"%s\",\"child\":%d}\n", spawn ? "spawned" : "forked", (int)child);
    fflush(stdout);
}

static void cmd_socket(char *line)
{
    int fd = -1, port = 0, ok = 0;
    if (!strncmp(line, "unix-connect ", 13)) {
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        snprintf(a.sun_path, sizeof(a.sun_path), "%s", strtok(line + 13, "\n"));
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        ok = fd >= 0 && !connect(fd, (struct sockaddr *)&a, sizeof(a));
    } else {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        bool listening = !strncmp(line, "tcp-listen", 10);
        if (!listening)
            a.sin_port = htons((uint16_t)atoi(line + 12));
        fd = socket(AF_INET, SOCK_STREAM, 0);
        ok = fd >= 0 && (listening ? !bind(fd, (struct sockaddr *)&a, sizeof(a)) && !listen(fd, 4)
                                   : !connect(fd, (struct sockaddr *)&a, sizeof(a)));
        socklen_t len = sizeof(a);
        if (ok && !getsockname(fd, (struct sockaddr *)&a, &len))
            port = ntohs(a.sin_port);
    }
    printf("{\"event\":\"socket\",\"ok\":%s,\"fd\":%d,\"port\":%d}\n", ok ? "true" : "false", fd, port);
    fflush(stdout);
}

int main(void)
{
    load_api();
    CHECK(cu.init(0), "cuInit");
    int count = 0;
    CHECK(cu.device_count(&count), "cuDeviceGetCount");
    const char *nd = getenv("APP_DEVICES");
    int devices = nd ? atoi(nd) : 1;
    if (devices < 1 || devices > count || devices > 2) {
        fprintf(stderr, "pool_app: APP_DEVICES=%d but %d devices\n", devices, count);
        return 2;
    }
    for (int d = 0; d < devices; d++)
        CHECK(cu.retain(&ctxs[d], d), "cuDevicePrimaryCtxRetain");
    for (int d = 0; d < devices; d++) {
        use_device(d);
        for (int i = 0; i < NBUF; i++) {
            bufs[nbufs].device = d;
            bufs[nbufs].size = sizes[i];
            CHECK(cu.alloc(&bufs[nbufs].ptr, sizes[i]), "cuMemAlloc");
            nbufs++;
        }
    }
    fill_all();
    print_buffers("ready");

    char line[256];
    while (fgets(line, sizeof(line), stdin)) {
        int n = 0;
        if (!strncmp(line, "state", 5)) {
            print_buffers("state");
        } else if (!strncmp(line, "mutate", 6)) {
            generation++;
            fill_all();
            print_buffers("mutated");
        } else if (sscanf(line, "touch %d", &n) == 1) {
            /* The first n percent of every buffer rewritten, the rest kept:
             * what an incremental checkpoint must find. */
            generation++;
            for (int i = 0; i < nbufs; i++) {
                use_device(bufs[i].device);
                size_t part = bufs[i].size * (size_t)n / 100;
                if (part)
                    launch_fill(bufs[i].ptr, part, 0x7F4A7C159E3779B9ull * (uint64_t)(i + 1) + (uint64_t)generation);
            }
            print_buffers("touched");
        } else if (sscanf(line, "zero %d", &n) == 1) {
            for (int i = 0; i < nbufs; i++) {
                use_device(bufs[i].device);
                size_t part = bufs[i].size * (size_t)n / 100;
                if (part)
                    launch_zero(bufs[i].ptr, part);
            }
            print_buffers("zeroed");
        } else if (!strncmp(line, "info", 4)) {
            cmd_info();
        } else if (sscanf(line, "churn %d", &n) == 1) {
            cmd_churn(n);
        } else if (sscanf(line, "threads %d", &n) == 1) {
            cmd_threads(n);
        } else if (!strncmp(line, "stop", 4)) {
            cmd_stop();
        } else if (sscanf(line, "alloc %d", &n) == 1) {
            use_device(0);
            CUdeviceptr extra;
            CHECK(cu.alloc(&extra, (size_t)n), "cuMemAlloc (extra)");
            printf("{\"event\":\"allocated\",\"addr\":\"0x%llx\"}\n", (unsigned long long)extra);
            fflush(stdout);
        } else if (sscanf(line, "try-alloc %d", &n) == 1) {
            /* An allocation that may fail (out of memory): its CUresult, and the application runs on. */
            use_device(0);
            CUdeviceptr extra = 0;
            int r = (int)cu.alloc(&extra, (size_t)n * (1u << 20));
            printf("{\"event\":\"try-alloc\",\"result\":%d}\n", r);
            fflush(stdout);
        } else if (!strncmp(line, "rewritten", 9)) {
            cmd_rewritten();
        } else if (!strncmp(line, "rewrite", 7)) {
            atomic_store(&stop_rewriter, 0);
            rewriting = !pthread_create(&rewriter_thread, NULL, rewriter, NULL);
            printf("{\"event\":\"rewriting\",\"started\":%s}\n", rewriting ? "true" : "false");
            fflush(stdout);
        } else if (!strncmp(line, "fds-left", 8)) {
            int keep = atoi(line + 8), opened = 0, fd, last[64];
            while ((fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0) {
                last[opened % 64] = fd;
                opened++;
            }
            for (int i = 0; i < keep && i < opened && i < 64; i++)
                close(last[(opened - 1 - i) % 64]);
            printf("{\"event\":\"fds\",\"opened\":%d,\"left\":%d}\n", opened, keep);
            fflush(stdout);
        } else if (!strncmp(line, "managed", 7)) {
            use_device(0);
            CUdeviceptr m;
            CHECK(cu.alloc_managed(&m, 1 << 20, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged");
            printf("{\"event\":\"managed\",\"addr\":\"0x%llx\"}\n", (unsigned long long)m);
            fflush(stdout);
        } else if (!strncmp(line, "fork", 4) || !strncmp(line, "spawn", 5)) {
            cmd_child(line[0] == 's');
        } else if (!strncmp(line, "logline", 7)) {
            int k = dprintf(log_fd, "line %d\n", ++log_lines);
            printf("{\"event\":\"logged\",\"ok\":%s}\n", k > 0 ? "true" : "false");
            fflush(stdout);
        } else if (!strncmp(line, "log ", 4) || !strncmp(line, "rwfile ", 7)) {
            bool rw = line[0] == 'r';
            char *path = strtok(line + (rw ? 7 : 4), "\n");
            int fd = open(path, rw ? O_RDWR | O_CREAT : O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (!rw)
                log_fd = fd;
            printf("{\"event\":\"opened\",\"fd\":%d}\n", fd);
            fflush(stdout);
        } else if (!strncmp(line, "tcp-", 4) || !strncmp(line, "unix-connect ", 13)) {
            cmd_socket(line);
        } else if (!strncmp(line, "quit", 4)) {
            break;
        } else {
            printf("{\"event\":\"error\",\"reason\":\"unknown command\"}\n");
            fflush(stdout);
        }
    }
    if (nworkers)
        cmd_stop();
    if (rewriting) {
        atomic_store(&stop_rewriter, 1);
        pthread_join(rewriter_thread, NULL);
    }
    printf("{\"event\":\"bye\"}\n");
    fflush(stdout);
    return 0;
}
