#define _GNU_SOURCE
#include "rebuild.h"

#include <errno.h>
#include <stdio.h>
#include <time.h>

#include "../interpose/contexts.h"
#include "../interpose/log.h"
#include "communicators.h"
#include "cut.h"
#include "real_nccl.h"

#define READY_TIMEOUT_NS (120ull * 1000000000ull)

static ncclResult_t call_error(const char *call, ncclResult_t r, char *why, size_t n)
{
    const char *(*text)(ncclResult_t) = (const char *(*)(ncclResult_t))gp_nccl_real("ncclGetErrorString");
    snprintf(why, n, "%s returned %d (%s)", call, r, text ? text(r) : "no libnccl");
    return r;
}

/* A non-blocking communicator finishes its init or finalize in the
 * background: wait for it. */
static ncclResult_t wait_ready(ncclComm_t real)
{
    ncclResult_t (*get)(ncclComm_t, ncclResult_t *) = GP_NCCL_REAL(ncclCommGetAsyncError, (ncclComm_t, ncclResult_t *));
    struct timespec t0, now, nap = { 0, 1000000 };
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        ncclResult_t state = ncclSuccess;
        ncclResult_t r = get(real, &state);
        if (r != ncclSuccess)
            return r;
        if (state != ncclInProgress)
            return state;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((uint64_t)(now.tv_sec - t0.tv_sec) * 1000000000ull + (uint64_t)(now.tv_nsec - t0.tv_nsec) > READY_TIMEOUT_NS)
            return ncclInProgress;
        nanosleep(&nap, NULL);
    }
}

static int destroy_one(struct gp_comm *c, char *why, size_t n)
{
    ncclResult_t (*finalize)(ncclComm_t) = GP_NCCL_REAL(ncclCommFinalize, (ncclComm_t));
    ncclResult_t (*destroy)(ncclComm_t) = GP_NCCL_REAL(ncclCommDestroy, (ncclComm_t));
    if (!finalize || !destroy) {
        snprintf(why, n, "libnccl has no ncclCommFinalize/ncclCommDestroy");
        return -ENOSYS;
    }
    /* Finalize flushes what the communicator has in flight (the cut made
     * sure every peer launched it), destroy frees it. */
    ncclResult_t r = finalize(c->real);
    if (r == ncclInProgress || r == ncclSuccess)
        r = wait_ready(c->real);
    if (r != ncclSuccess)
        return call_error("ncclCommFinalize", r, why, n), -EIO;
    pthread_rwlock_wrlock(&gp_comms_life);
    r = destroy(c->real);
    if (r == ncclSuccess)
        c->real = NULL;
    pthread_rwlock_unlock(&gp_comms_life);
    return r == ncclSuccess ? 0 : (call_error("ncclCommDestroy", r, why, n), -EIO);
}

int gp_nccl_teardown(char *why, size_t n)
{
    if (!gp_cut_reached()) {
        snprintf(why, n, "the ranks are not at a common collective boundary");
        return -EBUSY;
    }
    /* Newest first: communicators split off others go before their parents.
     * Units cannot start while the cut holds, so the list holds still. */
    pthread_mutex_lock(&gp_comms_lock);
    struct gp_comm *list = gp_comm_list();
    pthread_mutex_unlock(&gp_comms_lock);
    gp_nccl_enter_real();
    int err = 0;
    for (struct gp_comm *c = list; c && !err; c = c->next)
        if (c->real)
            err = destroy_one(c, why, n);
    gp_nccl_leave_real();
    return err;
}

int gp_nccl_new_id(ncclUniqueId *out, char *why, size_t n)
{
    ncclResult_t (*get)(ncclUniqueId *) = GP_NCCL_REAL(ncclGetUniqueId, (ncclUniqueId *));
    if (!get) {
        snprintf(why, n, "no libnccl is loaded");
        return -ENOSYS;
    }
    gp_nccl_enter_real();
    ncclResult_t r = get(out);
    gp_nccl_leave_real();
    return r == ncclSuccess ? 0 : (call_error("ncclGetUniqueId", r, why, n), -EIO);
}

int gp_nccl_rebuild(uint64_t key, const ncclUniqueId *id, char *why, size_t n)
{
    pthread_mutex_lock(&gp_comms_lock);
    struct gp_comm *c = gp_comm_list();
    while (c && c->key != key)
        c = c->next;
    pthread_mutex_unlock(&gp_comms_lock);
    if (!c)
        return snprintf(why, n, "no communicator %016llx", (unsigned long long)key), -ENOENT;
    if (c->real)
        return -EALREADY;
    ncclResult_t (*init)(ncclComm_t *, int, ncclUniqueId, int, void *) =
        GP_NCCL_REAL(ncclCommInitRankConfig, (ncclComm_t *, int, ncclUniqueId, int, void *));
    if (!init)
        return snprintf(why, n, "libnccl has no ncclCommInitRankConfig"), -ENOSYS;
    /* NCCL makes the communicator on the calling thread's current device. */
    CUresult cu = CUDA_SUCCESS;
    int err = gp_contexts_use_primary(c->device, &cu);
    if (err)
        return snprintf(why, n, "cannot make device %d current (CUresult %d)", c->device, (int)cu), err;
    ncclComm_t made = NULL;
    gp_nccl_enter_real();
    ncclResult_t r = init(&made, c->nranks, *id, c->rank, gp_comm_config(c));
    if (r == ncclInProgress || (r == ncclSuccess && made))
        r = wait_ready(made);
    gp_nccl_leave_real();
    if (r != ncclSuccess)
        return call_error("ncclCommInitRankConfig", r, why, n), -EIO;
    pthread_rwlock_wrlock(&gp_comms_life);
    c->real = made;
    pthread_rwlock_unlock(&gp_comms_life);
    GP_INFO("nccl", "communicator %016llx made again: rank %d of %d on device %d", (unsigned long long)key, c->rank,
            c->nranks, c->device);
    return 0;
}
