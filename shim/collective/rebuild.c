#define _GNU_SOURCE
#include "rebuild.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../interpose/contexts.h"
#include "../interpose/gate.h"
#include "../interpose/log.h"
#include "../interpose/shim.h"
#include "communicators.h"
#include "cut.h"
#include "proxy_wake.h"
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
    /* On the communicator's device: NCCL sets back the device it found,
     * and on a thread without a context that is device 0, whose context it
     * then makes (~520 MiB more for every driver checkpoint of a rank of
     * another GPU, and the rank on two GPUs). */
    CUresult cu = CUDA_SUCCESS;
    int err = gp_contexts_use_primary(c->device, &cu);
    if (err) {
        if (cu != CUDA_SUCCESS)
            snprintf(why, n, "no context on device %d for its communicator (CUresult %d)", c->device, (int)cu);
        else
            snprintf(why, n, "no context on device %d for its communicator: %s", c->device, strerror(-err));
        return err;
    }
    /* Finalize flushes what the communicator has in flight (the cut made
     * sure every peer launched it), destroy frees it. */
    uint64_t t0 = gp_now_ns();
    ncclResult_t r = finalize(c->real);
    if (r == ncclInProgress || r == ncclSuccess)
        r = wait_ready(c->real);
    if (r != ncclSuccess)
        return call_error("ncclCommFinalize", r, why, n), -EIO;
    uint64_t t1 = gp_now_ns();
    pthread_rwlock_wrlock(&gp_comms_life);
    r = destroy(c->real);
    if (r == ncclSuccess)
        c->real = NULL;
    pthread_rwlock_unlock(&gp_comms_life);
    GP_DEBUG("nccl", "communicator %d of %d torn down: finalize %.3f s, destroy %.3f s", c->rank, c->nranks,
             (double)(t1 - t0) / 1e9, (double)(gp_now_ns() - t1) / 1e9);
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
    gp_proxy_wake_arm(true);
    int err = 0;
    for (struct gp_comm *c = list; c && !err; c = c->next)
        if (c->real)
            err = destroy_one(c, why, n);
    gp_proxy_wake_arm(false);
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

/* One rebuild's NCCL init, on a thread of its own: a rank that never joins
 * (its controller died before asking it, or it died) leaves that thread
 * waiting in NCCL's bootstrap, not the control thread, which gives up at
 * the deadline. An init that completes after it was given up is aborted. */
struct init_job {
    struct gp_comm *c;
    ncclUniqueId id;
    ncclComm_t made;
    ncclResult_t result;
    CUresult cu;
    bool done, abandoned;
};

static pthread_mutex_t jobs_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t job_done = PTHREAD_COND_INITIALIZER;

static void *init_thread(void *arg)
{
    struct init_job *j = arg;
    ncclResult_t (*init)(ncclComm_t *, int, ncclUniqueId, int, void *) =
        GP_NCCL_REAL(ncclCommInitRankConfig, (ncclComm_t *, int, ncclUniqueId, int, void *));
    ncclComm_t made = NULL;
    ncclResult_t r = ncclSystemError;
    CUresult cu = CUDA_SUCCESS;
    /* NCCL makes the communicator on the calling thread's current device. */
    if (init && gp_contexts_use_primary(j->c->device, &cu) == 0) {
        gp_nccl_enter_real();
        r = init(&made, j->c->nranks, j->id, j->c->rank, gp_comm_config(j->c));
        if (r == ncclInProgress || (r == ncclSuccess && made))
            r = wait_ready(made);
        gp_nccl_leave_real();
    }
    pthread_mutex_lock(&jobs_lock);
    j->made = made;
    j->result = r;
    j->cu = cu;
    j->done = true;
    bool abandoned = j->abandoned;
    pthread_cond_broadcast(&job_done);
    pthread_mutex_unlock(&jobs_lock);
    if (abandoned) {
        ncclResult_t (*abort_comm)(ncclComm_t) = GP_NCCL_REAL(ncclCommAbort, (ncclComm_t));
        if (r == ncclSuccess && made && abort_comm) {
            gp_nccl_enter_real();
            abort_comm(made);
            gp_nccl_leave_real();
        }
        free(j);
    }
    return NULL;
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
    if (!gp_nccl_real("ncclCommInitRankConfig"))
        return snprintf(why, n, "libnccl has no ncclCommInitRankConfig"), -ENOSYS;
    struct init_job *j = calloc(1, sizeof(*j));
    if (!j)
        return -ENOMEM;
    j->c = c;
    j->id = *id;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    int err = pthread_create(&t, &attr, init_thread, j);
    pthread_attr_destroy(&attr);
    if (err) {
        free(j);
        return -err;
    }
    uint64_t timeout_s = gp_shim_config()->nccl_timeout_s;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)timeout_s;
    pthread_mutex_lock(&jobs_lock);
    while (!j->done && pthread_cond_timedwait(&job_done, &jobs_lock, &deadline) != ETIMEDOUT)
        ;
    if (!j->done) {
        j->abandoned = true; /* the thread frees it */
        pthread_mutex_unlock(&jobs_lock);
        snprintf(why, n, "ncclCommInitRankConfig of communicator %016llx did not return in %llu s: a rank did not join", (unsigned long long)key,
                 (unsigned long long)timeout_s);
        return -ETIMEDOUT;
    }
    pthread_mutex_unlock(&jobs_lock);
    ncclComm_t made = j->made;
    ncclResult_t r = j->result;
    CUresult cu = j->cu;
    free(j);
    if (cu != CUDA_SUCCESS)
        return snprintf(why, n, "cannot make device %d current (CUresult %d)", c->device, (int)cu), -EIO;
    if (r != ncclSuccess)
        return call_error("ncclCommInitRankConfig", r, why, n), -EIO;
    pthread_rwlock_wrlock(&gp_comms_life);
    c->real = made;
    pthread_rwlock_unlock(&gp_comms_life);
    GP_INFO("nccl", "communicator %016llx made again: rank %d of %d on device %d", (unsigned long long)key, c->rank,
            c->nranks, c->device);
    return 0;
}
