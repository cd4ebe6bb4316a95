/* Micro-benchmark of what the shim adds on the hot path. Prints one JSON
 * line and exits (no protocol):
 *   {"event":"bench","mallocFreeNs":M,"launchesPerSec":L,"driverCallNs":D,...}
 * mallocFreeNs: median, over REPS repetitions, of the median time of one
 *   cudaMalloc(1 MiB) + cudaFree pair (PAIRS pairs per repetition);
 * launchesPerSec: median over REPS of LAUNCHES empty-kernel launches on one
 *   stream, synchronized at the end, divided by the elapsed time;
 * driverCallNs: median over REPS of the mean time of one cuCtxGetCurrent,
 *   the cheapest driver call there is, taken from cudaGetDriverEntryPoint-
 *   ByVersion as the runtime takes its own: what the shim adds to any call;
 * launchRatioInProcess: in one process, cuLaunchKernel as the runtime gets
 *   it (the shim's wrapper, when under the shim) against the driver's own
 *   entry point read from libcuda's symbol table, in alternating blocks;
 *   the median of the blocks' rate ratios. Launch rates differ by up to 20 %
 *   from one process to the next, which buries a cost of 1 % between two
 *   processes; within one process they do not. Plain, both are the same
 *   function: the ratio then shows the method's own spread.
 * With BENCH_CPU=N the measuring thread runs on CPU N only (after the
 * warm-up, so the runtime's own threads are not confined with it): the
 * plain and the shimmed run then differ in the shim, not in where the
 * scheduler put them.
 * The runner runs it plain and under `gpuckpt run` and prints the ratios.
 * Usage: bench_alloc [PAIRS=2000] [LAUNCHES=200000] [REPS=5]
 *
 *        bench_alloc rate LAUNCHES
 * only the launch rate, once ({"event":"bench","launchesPerSec":L}): cheap
 * enough to start many processes, which is what comparing launch rates
 * between processes takes.
 *
 *        bench_alloc count LAUNCHES
 * counts instead: after the warm-up prints {"event":"warm"} and waits for a
 * line on stdin, launches LAUNCHES empty kernels and synchronizes, prints
 * {"event":"launched"} and waits for another line; between the two the
 * runner reads the shim's count of driver calls (gpuckpt ps). */
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cuda.h>

#include <algorithm>
#include <vector>

#include "gputest.h"

__global__ void empty_kernel() {}

typedef CUresult (*ctx_get_current_fn)(CUcontext *ctx);
typedef CUresult (*launch_kernel_fn)(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                     unsigned bz, unsigned shmem, CUstream st, void **params, void **extra);

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

/* -1: not pinned. */
static int pin_to_bench_cpu(void)
{
    const char *s = getenv("BENCH_CPU");
    if (!s || !*s)
        return -1;
    int cpu = atoi(s);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set))
        gt_die("cannot pin to CPU %d", cpu);
    return cpu;
}

static int find_libcuda(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    if (!info->dlpi_name || !strstr(info->dlpi_name, "libcuda.so"))
        return 0;
    *(struct dl_phdr_info *)arg = *info;
    return 1;
}

/* The driver's own entry point `name`, past any interposer (which hooks
 * dlsym and cuGetProcAddress, not the file): libcuda's load address plus
 * the symbol's value in the file's dynamic symbol table. */
static void *driver_symbol_from_file(const char *name)
{
    struct dl_phdr_info lib = {};
    if (!dl_iterate_phdr(find_libcuda, &lib) || lib.dlpi_name[0] != '/')
        gt_die("libcuda is not loaded from an absolute path");
    int fd = open(lib.dlpi_name, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st))
        gt_die("cannot read %s", lib.dlpi_name);
    const char *map = (const char *)mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        gt_die("cannot map %s", lib.dlpi_name);
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)map;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(map + eh->e_shoff);
    void *found = NULL;
    for (int i = 0; i < eh->e_shnum && !found; i++) {
        if (sh[i].sh_type != SHT_DYNSYM)
            continue;
        const Elf64_Sym *sym = (const Elf64_Sym *)(map + sh[i].sh_offset);
        const char *names = map + sh[sh[i].sh_link].sh_offset;
        for (size_t j = 0; j < sh[i].sh_size / sizeof *sym; j++)
            if (sym[j].st_value && !strcmp(names + sym[j].st_name, name)) {
                found = (void *)(lib.dlpi_addr + sym[j].st_value);
                break;
            }
    }
    munmap((void *)map, (size_t)st.st_size);
    if (!found)
        gt_die("%s: not in %s", name, lib.dlpi_name);
    return found;
}

static double launch_rate_of(launch_kernel_fn launch, CUfunction f, cudaStream_t st, int n)
{
    double t0 = gt_now();
    for (int i = 0; i < n; i++)
        if (launch(f, 1, 1, 1, 1, 1, 1, 0, (CUstream)st, NULL, NULL))
            gt_die("cuLaunchKernel failed");
    GT_CK(cudaStreamSynchronize(st));
    return n / (gt_now() - t0);
}

/* Rate through `as_given` over rate through `own`, per pair of blocks of n
 * launches, the order of each pair alternating. */
static std::vector<double> in_process_ratios(launch_kernel_fn as_given, launch_kernel_fn own, cudaStream_t st,
                                             int pairs, int n)
{
    CUfunction f;
    GT_CK(cudaGetFuncBySymbol((cudaFunction_t *)&f, (const void *)empty_kernel));
    std::vector<double> ratios;
    for (int i = 0; i < pairs; i++) {
        double given, mine;
        if (i % 2) {
            mine = launch_rate_of(own, f, st, n);
            given = launch_rate_of(as_given, f, st, n);
        } else {
            given = launch_rate_of(as_given, f, st, n);
            mine = launch_rate_of(own, f, st, n);
        }
        ratios.push_back(given / mine);
    }
    return ratios;
}

static void launch_empty(cudaStream_t st, int n)
{
    for (int i = 0; i < n; i++)
        empty_kernel<<<1, 1, 0, st>>>();
    GT_CK(cudaGetLastError());
    GT_CK(cudaStreamSynchronize(st));
}

static int count_calls(cudaStream_t st, int launches)
{
    char line[64], pid[32];
    snprintf(pid, sizeof pid, ",\"pid\":%d", (int)getpid());
    gt_emit("warm", pid, NULL, 0);
    if (!gt_read_cmd(line, sizeof line))
        return 1;
    launch_empty(st, launches);
    gt_emit("launched", NULL, NULL, 0);
    gt_read_cmd(line, sizeof line);
    return 0;
}

int main(int argc, char **argv)
{
    bool counting = argc > 1 && !strcmp(argv[1], "count");
    bool rate_only = argc > 1 && !strcmp(argv[1], "rate");
    int pairs = argc > 1 && !counting && !rate_only ? atoi(argv[1]) : 2000;
    int launches = argc > 2 ? atoi(argv[2]) : 200000;
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    std::vector<double> malloc_ns, launch_rate, call_ns, pair_ns((size_t)pairs);
    cudaStream_t st;
    void *p;
    CUcontext ctx;
    ctx_get_current_fn ctx_get_current;
    launch_kernel_fn launch_as_given;
    cudaDriverEntryPointQueryResult found;

    gt_prog = "bench_alloc";
    if (pairs < 1 || launches < 1 || reps < 1)
        gt_die("usage: bench_alloc [PAIRS] [LAUNCHES] [REPS] | bench_alloc count|rate LAUNCHES");
    GT_CK(cudaSetDevice(0));
    GT_CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    GT_CK(cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", (void **)&ctx_get_current, 12000, cudaEnableDefault,
                                           &found));
    if (found != cudaDriverEntryPointSuccess)
        gt_die("cuCtxGetCurrent: no driver entry point");
    GT_CK(cudaGetDriverEntryPointByVersion("cuLaunchKernel", (void **)&launch_as_given, 12000, cudaEnableDefault,
                                           &found));
    if (found != cudaDriverEntryPointSuccess)
        gt_die("cuLaunchKernel: no driver entry point");
    /* warm-up: context, module load, first allocations */
    for (int i = 0; i < 100; i++) {
        GT_CK(cudaMalloc(&p, 1 << 20));
        GT_CK(cudaFree(p));
        empty_kernel<<<1, 1, 0, st>>>();
    }
    GT_CK(cudaStreamSynchronize(st));
    if (counting)
        return count_calls(st, launches);
    int cpu = pin_to_bench_cpu();
    if (rate_only) {
        char extra[100];
        double t0 = gt_now();
        launch_empty(st, launches);
        snprintf(extra, sizeof extra, ",\"pid\":%d,\"cpu\":%d,\"launchesPerSec\":%.0f", (int)getpid(), cpu,
                 launches / (gt_now() - t0));
        gt_emit("bench", extra, NULL, 0);
        return 0;
    }
    launch_kernel_fn launch_own = (launch_kernel_fn)driver_symbol_from_file("cuLaunchKernel");
    std::vector<double> in_process = in_process_ratios(launch_as_given, launch_own, st, 20, 20000);

    for (int r = 0; r < reps; r++) {
        for (int i = 0; i < pairs; i++) {
            double t0 = gt_now();
            GT_CK(cudaMalloc(&p, 1 << 20));
            GT_CK(cudaFree(p));
            pair_ns[(size_t)i] = (gt_now() - t0) * 1e9;
        }
        malloc_ns.push_back(median(pair_ns));

        double t0 = gt_now();
        launch_empty(st, launches);
        launch_rate.push_back(launches / (gt_now() - t0));

        const int calls = 1000000;
        t0 = gt_now();
        for (int i = 0; i < calls; i++)
            if (ctx_get_current(&ctx))
                gt_die("cuCtxGetCurrent failed");
        call_ns.push_back((gt_now() - t0) * 1e9 / calls);
    }
    GT_CK(cudaStreamDestroy(st));

    char extra[2000], a[400], b[400], c[400], d[400];
    json_list(a, sizeof a, malloc_ns);
    json_list(b, sizeof b, launch_rate);
    json_list(c, sizeof c, call_ns);
    std::vector<double> in_process_pct;
    for (double r : in_process)
        in_process_pct.push_back(100 * r);
    json_list(d, sizeof d, in_process_pct);
    snprintf(extra, sizeof extra,
             ",\"pid\":%d,\"cpu\":%d,\"mallocFreeNs\":%.1f,\"launchesPerSec\":%.0f,\"driverCallNs\":%.2f,"
             "\"launchRatioInProcess\":%.5f,\"launchWrapped\":%s,\"pairs\":%d,\"launches\":%d,\"reps\":%d,"
             "\"mallocFreeNsReps\":%s,\"launchesPerSecReps\":%s,\"driverCallNsReps\":%s,\"launchPctInProcessReps\":%s",
             (int)getpid(), cpu, median(malloc_ns), median(launch_rate), median(call_ns), median(in_process),
             launch_own == launch_as_given ? "false" : "true", pairs, launches, reps, a, b, c, d);
    gt_emit("bench", extra, NULL, 0);
    return 0;
}
