/* A fake libnccl.so.2 for CPU-only tests: the communicators of a job's
 * processes really exchange data, through a shared-memory segment per
 * communicator, and a collective returns only once every rank has made it
 * (the real one returns at once, and the GPU waits): a rank stopped while a
 * peer is inside a collective leaves that peer waiting, as on a GPU.
 *
 * Device memory is host memory in the fake libcuda, so buffers are read and
 * written directly. Supported: float sum all-reduce, broadcast (ncclBcast
 * calls ncclBroadcast through the PLT, as NCCL's own does), split, groups
 * (their calls run at once, in order), finalize/destroy/abort, the
 * queries, register/deregister, ncclMemAlloc. While a process has a
 * communicator, the file <fake ckpt dir>/<pid>.peers exists: the fake
 * driver then refuses to checkpoint it, as the real one fails on a process
 * holding peers' memory.
 *
 * With FAKE_NCCL_UDS=1 each communicator runs a thread like NCCL's UDS
 * service thread: poll() on a datagram socket bound to NCCL's abstract
 * name, its stop flag read only when poll returns (here after 10 s, in
 * NCCL after 500 ms). Destroy sets the flag, joins the thread and says on
 * stderr whether a datagram or the timeout ended it. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))
#define MAX_RANKS 8
#define MAX_FLOATS (1 << 18)

typedef int ncclResult_t;
typedef struct { char internal[128]; } ncclUniqueId;
enum { ncclSuccess, ncclUnhandledCudaError, ncclSystemError, ncclInternalError, ncclInvalidArgument, ncclInvalidUsage };

struct segment {
    atomic_int attached;
    atomic_int arrived;
    atomic_int generation;
    int nranks;
    int colors[MAX_RANKS], keys[MAX_RANKS];
    float data[MAX_RANKS][MAX_FLOATS];
};

struct uds_service {
    int fd;
    atomic_int stop, by_datagram;
    pthread_t thread;
};

struct ncclComm {
    struct segment *seg;
    char name[96];
    int nranks, rank, device;
    unsigned splits;
    int registered;
    struct uds_service *uds;
};
typedef struct ncclComm *ncclComm_t;

static int live_comms;

static void peers_marker(int delta)
{
    live_comms += delta;
    char dir[256], path[300];
    const char *d = getenv("FAKE_CUDA_CKPT_DIR");
    if (d)
        snprintf(dir, sizeof(dir), "%s", d);
    else
        snprintf(dir, sizeof(dir), "/tmp/fake-cuda-ckpt-%u", (unsigned)getuid());
    mkdir(dir, 0700);
    snprintf(path, sizeof(path), "%s/%d.peers", dir, (int)getpid());
    if (live_comms > 0) {
        int fd = open(path, O_WRONLY | O_CREAT, 0600);
        if (fd >= 0)
            close(fd);
    } else {
        unlink(path);
    }
}

static void nap(void)
{
    struct timespec t = { 0, 20000 };
    nanosleep(&t, NULL);
}

static void barrier(struct ncclComm *c)
{
    struct segment *s = c->seg;
    int g = atomic_load(&s->generation);
    if (atomic_fetch_add(&s->arrived, 1) == c->nranks - 1) {
        atomic_store(&s->arrived, 0);
        atomic_fetch_add(&s->generation, 1);
    } else {
        while (atomic_load(&s->generation) == g)
            nap();
    }
}

static void *uds_service_main(void *arg)
{
    struct uds_service *u = arg;
    struct pollfd p = { .fd = u->fd, .events = POLLIN };
    for (;;) {
        int ret;
        do
            ret = poll(&p, 1, 10000);
        while (ret < 0 && errno == EINTR);
        if (atomic_load(&u->stop)) {
            atomic_store(&u->by_datagram, ret > 0);
            return NULL;
        }
        char b;
        if (ret > 0 && recv(u->fd, &b, 1, MSG_DONTWAIT) < 0)
            return NULL;
    }
}

static struct uds_service *uds_start(int rank)
{
    const char *on = getenv("FAKE_NCCL_UDS");
    if (!on || strcmp(on, "1") != 0)
        return NULL;
    struct uds_service *u = calloc(1, sizeof(*u));
    if (!u)
        return NULL;
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    static atomic_uint serial;
    snprintf(a.sun_path, sizeof(a.sun_path), "/tmp/nccl-socket-%d-%x%x", rank, (unsigned)getpid(), atomic_fetch_add(&serial, 1));
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(a.sun_path));
    a.sun_path[0] = '\0';
    u->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (u->fd < 0 || bind(u->fd, (struct sockaddr *)&a, len) != 0 || pthread_create(&u->thread, NULL, uds_service_main, u) != 0) {
        if (u->fd >= 0)
            close(u->fd);
        free(u);
        return NULL;
    }
    return u;
}

static void uds_stop(struct uds_service *u, int rank)
{
    if (!u)
        return;
    atomic_store(&u->stop, 1);
    pthread_join(u->thread, NULL);
    fprintf(stderr, "fake-nccl: rank %d: UDS thread ended %s\n", rank, atomic_load(&u->by_datagram) ? "by a datagram" : "at its poll timeout");
    close(u->fd);
    free(u);
}

static ncclResult_t attach(struct ncclComm **out, const char *name, int nranks, int rank, int device)
{
    if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks)
        return ncclInvalidArgument;
    int fd = shm_open(name, O_RDWR | O_CREAT, 0600);
    if (fd < 0)
        return ncclSystemError;
    if (ftruncate(fd, sizeof(struct segment)) != 0) {
        close(fd);
        return ncclSystemError;
    }
    struct segment *s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (s == MAP_FAILED)
        return ncclSystemError;
    struct ncclComm *c = calloc(1, sizeof(*c));
    c->seg = s;
    snprintf(c->name, sizeof(c->name), "%s", name);
    c->nranks = nranks;
    c->rank = rank;
    c->device = device;
    s->nranks = nranks;
    atomic_fetch_add(&s->attached, 1);
    while (atomic_load(&s->attached) < nranks)
        nap();
    barrier(c);
    if (rank == 0)
        shm_unlink(name); /* the mappings keep it */
    peers_marker(1);
    c->uds = uds_start(rank);
    *out = c;
    return ncclSuccess;
}

API ncclResult_t ncclGetVersion(int *v)
{
    *v = 22809;
    return ncclSuccess;
}

/* Segments whose ranks never all attached (a test ended them first) keep
 * their name: each new id removes those of processes that have ended. */
static void remove_orphan_segments(void)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        int pid;
        char name[300];
        if (sscanf(e->d_name, "fakenccl-%d-", &pid) != 1 || pid <= 0)
            continue;
        bool ended = kill(pid, 0) != 0 && errno == ESRCH;
        if (!ended)
            continue;
        snprintf(name, sizeof(name), "/%s", e->d_name);
        shm_unlink(name);
    }
    closedir(d);
}

API ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    static unsigned counter;
    if (!counter)
        remove_orphan_segments();
    memset(id, 0, sizeof(*id));
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    snprintf(id->internal, sizeof(id->internal), "/fakenccl-%d-%u-%ld", (int)getpid(), counter++, (long)t.tv_nsec);
    return ncclSuccess;
}

/* The CUDA calls NCCL makes through the runtime, to the driver the
 * process has (the shim's, under it the fake libcuda). */
typedef int (*get_device_fn)(int *);
typedef int (*retain_fn)(void **, int);
typedef int (*set_current_fn)(void *);

/* cudaGetDevice: the current context's device; on a thread without one,
 * the runtime's default, 0. */
static int current_device(void)
{
    get_device_fn get = (get_device_fn)dlsym(RTLD_DEFAULT, "cuCtxGetDevice");
    int d;
    return get && get(&d) == 0 ? d : 0;
}

/* cudaSetDevice, which since CUDA 12 makes the device's primary context. */
static void set_device(int device)
{
    retain_fn retain = (retain_fn)dlsym(RTLD_DEFAULT, "cuDevicePrimaryCtxRetain");
    set_current_fn set = (set_current_fn)dlsym(RTLD_DEFAULT, "cuCtxSetCurrent");
    void *ctx;
    if (retain && set && retain(&ctx, device) == 0)
        set(ctx);
}

/* As NCCL's finalize and destroy do: on the communicator's device, then
 * back on the device found, made current even where none was. */
static ncclResult_t on_comm_device(ncclComm_t comm, ncclResult_t (*fn)(ncclComm_t))
{
    if (!comm)
        return ncclInvalidArgument;
    int saved = current_device(), device = comm->device; /* fn may free comm */
    if (saved != device)
        set_device(device);
    ncclResult_t r = fn(comm);
    if (saved != device)
        set_device(saved);
    return r;
}

API ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    return attach(comm, id.internal, nranks, rank, current_device());
}

API ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, void *config)
{
    return attach(comm, id.internal, nranks, rank, current_device());
}

API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, void *config)
{
    struct segment *s = comm->seg;
    s->colors[comm->rank] = color;
    s->keys[comm->rank] = key;
    barrier(comm);
    int n = 0, rank = 0;
    for (int r = 0; r < comm->nranks; r++) {
        if (s->colors[r] != color)
            continue;
        n++;
        if (s->keys[r] < key || (s->keys[r] == key && r < comm->rank))
            rank++;
    }
    unsigned split = comm->splits++;
    barrier(comm);
    if (color < 0) {
        *newcomm = NULL;
        return ncclSuccess;
    }
    char name[96];
    snprintf(name, sizeof(name), "%.60s.%u.%d", comm->name, split, color);
    return attach(newcomm, name, n, rank, comm->device);
}

static ncclResult_t detach(ncclComm_t comm)
{
    if (!comm)
        return ncclInvalidArgument;
    uds_stop(comm->uds, comm->rank);
    munmap(comm->seg, sizeof(*comm->seg));
    free(comm);
    peers_marker(-1);
    return ncclSuccess;
}

static ncclResult_t finalized(ncclComm_t comm) { (void)comm; return ncclSuccess; }
API ncclResult_t ncclCommFinalize(ncclComm_t comm) { return on_comm_device(comm, finalized); }
API ncclResult_t ncclCommDestroy(ncclComm_t comm) { return on_comm_device(comm, detach); }
API ncclResult_t ncclCommAbort(ncclComm_t comm) { return detach(comm); }

API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *e)
{
    *e = ncclSuccess;
    return comm ? ncclSuccess : ncclInvalidArgument;
}

API ncclResult_t ncclCommCount(ncclComm_t comm, int *n) { *n = comm->nranks; return ncclSuccess; }
API ncclResult_t ncclCommUserRank(ncclComm_t comm, int *r) { *r = comm->rank; return ncclSuccess; }
API ncclResult_t ncclCommCuDevice(ncclComm_t comm, int *d) { *d = comm->device; return ncclSuccess; }
API const char *ncclGetErrorString(ncclResult_t r) { return r ? "fake nccl error" : "no error"; }
API const char *ncclGetLastError(ncclComm_t comm) { return ""; }

API ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, int datatype, int op, ncclComm_t comm, void *stream)
{
    if (count > MAX_FLOATS || datatype != 7 || op != 0)
        return ncclInvalidArgument;
    struct segment *s = comm->seg;
    memcpy(s->data[comm->rank], send, count * sizeof(float));
    barrier(comm);
    float *out = recv;
    for (size_t i = 0; i < count; i++) {
        float sum = 0;
        for (int r = 0; r < comm->nranks; r++)
            sum += s->data[r][i];
        out[i] = sum;
    }
    barrier(comm);
    return ncclSuccess;
}

API ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, int datatype, int root, ncclComm_t comm, void *stream)
{
    if (count > MAX_FLOATS || datatype != 7 || root < 0 || root >= comm->nranks)
        return ncclInvalidArgument;
    struct segment *s = comm->seg;
    if (comm->rank == root)
        memcpy(s->data[root], send, count * sizeof(float));
    barrier(comm);
    memmove(recv, s->data[root], count * sizeof(float));
    barrier(comm);
    return ncclSuccess;
}

API ncclResult_t ncclBcast(void *buff, size_t count, int datatype, int root, ncclComm_t comm, void *stream)
{
    return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

API ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
API ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }

API ncclResult_t ncclCommRegister(ncclComm_t comm, void *buff, size_t size, void **handle)
{
    comm->registered++;
    *handle = buff;
    return ncclSuccess;
}

API ncclResult_t ncclCommDeregister(ncclComm_t comm, void *handle)
{
    comm->registered--;
    return ncclSuccess;
}

API ncclResult_t ncclMemAlloc(void **ptr, size_t size)
{
    *ptr = malloc(size);
    return *ptr ? ncclSuccess : ncclSystemError;
}

API ncclResult_t ncclMemFree(void *ptr)
{
    free(ptr);
    return ncclSuccess;
}
