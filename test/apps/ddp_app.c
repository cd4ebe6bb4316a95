/* CPU test job of several ranks, like torchrun and a data-parallel
 * training script: the launcher starts N rank processes (the same program)
 * and waits for them, as torchrun's agent does. Each rank puts its
 * parameters and gradients in device memory (the fake libcuda), and every
 * step all-reduces the gradients through NCCL (the fake libnccl, whose
 * ranks really exchange data) and prints its loss exactly (%a): a job
 * stopped, checkpointed or moved at the wrong point hangs or prints other
 * numbers than an uninterrupted run.
 *
 *   ddp_app launch N STEPS [STEP_MS]   the launcher; ranks inherit DDP_*
 *   ddp_app rank R N STEPS [STEP_MS]   one rank (started by hand: a rank of a
 *                                      job whose peers are in another job)
 * Environment: DDP_STORE  directory where rank 0 leaves the unique id
 *              DDP_SPLIT=1 also split a second communicator off the first
 *                          and broadcast on it every step
 *              DDP_REGISTER=1 register the gradients with NCCL (a
 *                          registration a checkpoint must refuse)
 *              DDP_LAUNCHER_CUDA=1 the launcher starts the driver and
 *                          counts the GPUs, and makes no context
 *                          (torchrun's agent)
 *              DDP_BUFFER_MIB=M each rank also holds a buffer of M MiB
 *                          (a pool whose size counts)
 * Every third step's all-reduce runs inside ncclGroupStart/End. SIGUSR1
 * makes a rank spend 3 s outside NCCL before its next step (a rank stuck
 * in its own work while its peers wait in a collective). */
#define _GNU_SOURCE
#include <cuda.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct ncclComm *ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
int ncclGetUniqueId(ncclUniqueId *id);
int ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
int ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, void *config);
int ncclAllReduce(const void *s, void *r, size_t n, int type, int op, ncclComm_t comm, CUstream stream);
int ncclBcast(void *b, size_t n, int type, int root, ncclComm_t comm, CUstream stream);
int ncclGroupStart(void);
int ncclGroupEnd(void);
int ncclCommRegister(ncclComm_t comm, void *buff, size_t size, void **handle);
int ncclCommDestroy(ncclComm_t comm);

#define N_PARAMS 65536
#define NCCL_FLOAT 7
#define NCCL_SUM 0

static void die(const char *what, int code)
{
    fprintf(stderr, "ddp_app: %s failed (%d)\n", what, code);
    exit(2);
}
#define CHECK(call, what)                                                                                      \
    do {                                                                                                       \
        int r_ = (int)(call);                                                                                  \
        if (r_)                                                                                                \
            die(what, r_);                                                                                     \
    } while (0)

/* Kernels: in the fake driver a CUfunction is a host function, launched
 * (through the shim's gate, as on a GPU) by cuLaunchKernel. Device memory
 * is touched only inside them: a suspended pool is unmapped. */
struct step {
    float *p, *g, *b;
    int rank, nranks, s;
    double loss;
};

static void init_kernel(void **params)
{
    struct step *a = params[0];
    for (int i = 0; i < N_PARAMS; i++)
        a->p[i] = (float)((i % 97) - 48) / 64.0f;
}

static void grad_kernel(void **params)
{
    struct step *a = params[0];
    for (int i = 0; i < N_PARAMS; i++)
        a->g[i] = sinf(a->p[i] * (float)(a->rank + 1) + (float)a->s * 0.001f);
}

static void update_kernel(void **params)
{
    struct step *a = params[0];
    a->loss = 0;
    for (int i = 0; i < N_PARAMS; i++) {
        a->p[i] -= 0.01f * a->g[i] / (float)a->nranks;
        a->loss += a->p[i];
    }
    a->b[0] = (float)a->loss;
}

static void add_broadcast_kernel(void **params)
{
    struct step *a = params[0];
    a->loss += a->b[0];
}

static void run_kernel(void (*kernel)(void **), struct step *a)
{
    void *params[] = { a };
    CHECK(cuLaunchKernel((CUfunction)(void *)kernel, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), "cuLaunchKernel");
}

static volatile sig_atomic_t stall;

static void on_usr1(int sig)
{
    (void)sig;
    stall = 1;
}

static void sleep_ms(int ms)
{
    struct timespec t = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&t, NULL);
}

static void store_path(char *buf, size_t n, const char *name)
{
    const char *dir = getenv("DDP_STORE");
    snprintf(buf, n, "%s/%s", dir ? dir : ".", name);
}

static ncclUniqueId exchange_id(int rank)
{
    ncclUniqueId id;
    char path[512], tmp[520];
    store_path(path, sizeof(path), "id");
    if (rank == 0) {
        CHECK(ncclGetUniqueId(&id), "ncclGetUniqueId");
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(&id, sizeof(id), 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0)
            die("writing the unique id", 1);
        return id;
    }
    for (;;) {
        FILE *f = fopen(path, "rb");
        if (f) {
            size_t got = fread(&id, sizeof(id), 1, f);
            fclose(f);
            if (got == 1)
                return id;
        }
        sleep_ms(5);
    }
}

static int run_rank(int rank, int nranks, int steps, int step_ms)
{
    CHECK(cuInit(0), "cuInit");
    int ndev = 0;
    CHECK(cuDeviceGetCount(&ndev), "cuDeviceGetCount");
    CUdevice dev;
    CHECK(cuDeviceGet(&dev, rank % ndev), "cuDeviceGet");
    CUcontext ctx;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    CHECK(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    CUdeviceptr dp, dg, db;
    CHECK(cuMemAlloc(&dp, N_PARAMS * sizeof(float)), "cuMemAlloc");
    CHECK(cuMemAlloc(&dg, N_PARAMS * sizeof(float)), "cuMemAlloc");
    CHECK(cuMemAlloc(&db, 8 * sizeof(float)), "cuMemAlloc");
    const char *buffer_mib = getenv("DDP_BUFFER_MIB");
    CUdeviceptr buffer;
    if (buffer_mib)
        CHECK(cuMemAlloc(&buffer, (size_t)atoi(buffer_mib) << 20), "cuMemAlloc");
    struct step a = { (float *)dp, (float *)dg, (float *)db, rank, nranks, 0, 0 }; /* device memory is host memory in the fake */
    run_kernel(init_kernel, &a);

    ncclComm_t comm, split = NULL;
    CHECK(ncclCommInitRank(&comm, nranks, exchange_id(rank), rank), "ncclCommInitRank");
    if (getenv("DDP_SPLIT"))
        CHECK(ncclCommSplit(comm, 0, rank, &split, NULL), "ncclCommSplit");
    if (getenv("DDP_REGISTER")) {
        void *handle;
        CHECK(ncclCommRegister(comm, a.g, N_PARAMS * sizeof(float), &handle), "ncclCommRegister");
    }
    printf("rank %d ready pid %d\n", rank, (int)getpid());
    fflush(stdout);
    signal(SIGUSR1, on_usr1);
    for (int s = 0; s < steps; s++) {
        if (stall) {
            sleep_ms(3000);
            stall = 0;
        }
        a.s = s;
        run_kernel(grad_kernel, &a);
        if (s % 3 == 0)
            CHECK(ncclGroupStart(), "ncclGroupStart");
        CHECK(ncclAllReduce(a.g, a.g, N_PARAMS, NCCL_FLOAT, NCCL_SUM, comm, NULL), "ncclAllReduce");
        if (s % 3 == 0)
            CHECK(ncclGroupEnd(), "ncclGroupEnd");
        run_kernel(update_kernel, &a);
        if (split) {
            CHECK(ncclBcast(a.b, 8, NCCL_FLOAT, 0, split, NULL), "ncclBcast");
            run_kernel(add_broadcast_kernel, &a);
        }
        printf("rank %d step %d loss %a\n", rank, s, a.loss);
        fflush(stdout);
        sleep_ms(step_ms);
    }
    if (split)
        CHECK(ncclCommDestroy(split), "ncclCommDestroy");
    CHECK(ncclCommDestroy(comm), "ncclCommDestroy");
    printf("rank %d done\n", rank);
    return 0;
}

static int launch(const char *self, int nranks, const char *steps, const char *step_ms)
{
    pid_t pids[16];
    if (nranks < 1 || nranks > 16)
        die("rank count", nranks);
    if (getenv("DDP_LAUNCHER_CUDA")) { /* as torchrun does (torch.cuda.device_count): the driver, no context */
        int ndev = 0;
        CHECK(cuInit(0), "cuInit");
        CHECK(cuDeviceGetCount(&ndev), "cuDeviceGetCount");
    }
    for (int r = 0; r < nranks; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            char rank[16], n[16];
            snprintf(rank, sizeof(rank), "%d", r);
            snprintf(n, sizeof(n), "%d", nranks);
            execl(self, self, "rank", rank, n, steps, step_ms, (char *)NULL);
            _exit(127);
        }
    }
    int failed = 0;
    for (int r = 0; r < nranks; r++) {
        int status;
        if (waitpid(pids[r], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
            failed = 1;
    }
    printf("launcher done%s\n", failed ? " (a rank failed)" : "");
    return failed;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *step_ms = argc > 5 ? argv[5] : "20";
    if (argc >= 4 && strcmp(argv[1], "launch") == 0)
        return launch("/proc/self/exe", atoi(argv[2]), argv[3], argc > 4 ? argv[4] : "20");
    if (argc >= 5 && strcmp(argv[1], "rank") == 0)
        return run_rank(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(step_ms));
    fprintf(stderr, "usage: ddp_app launch N STEPS [STEP_MS] | ddp_app rank R N STEPS [STEP_MS]\n");
    return 2;
}
