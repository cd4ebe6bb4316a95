/* The NCCL entry points the application calls, in front of NCCL's own
 * (nccl_functions.h lists them): handles translated, units of the cut
 * counted, communicators recorded. Calls NCCL makes into its own exported
 * functions (ncclBcast calls ncclBroadcast) pass straight through. */
#define _GNU_SOURCE
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <unistd.h>

#include "../interpose/log.h"
#include "../interpose/real_driver.h"
#include "communicators.h"
#include "cut.h"
#include "nccl_api.h"
#include "real_nccl.h"

#define REAL_OR_FAIL(fn, name, params)                                                                         \
    ncclResult_t(*fn) params = GP_NCCL_REAL(name, params);                                                     \
    if (!fn)                                                                                                   \
        return ncclSystemError

#define CALL_REAL(r, call)                                                                                     \
    do {                                                                                                       \
        gp_nccl_enter_real();                                                                                  \
        r = call;                                                                                              \
        gp_nccl_leave_real();                                                                                  \
    } while (0)

static struct gp_comm *ours(ncclComm_t h)
{
    if (!h || gp_nccl_inside())
        return NULL;
    pthread_mutex_lock(&gp_comms_lock);
    struct gp_comm *c = gp_comm_find(h);
    pthread_mutex_unlock(&gp_comms_lock);
    return c;
}

static bool launched(ncclResult_t r)
{
    return r == ncclSuccess || r == ncclInProgress;
}

#define GP_NCCL_OP(name, params, args)                                                                         \
    GP_EXPORT ncclResult_t name params                                                                         \
    {                                                                                                          \
        REAL_OR_FAIL(real_, name, params);                                                                     \
        struct gp_comm *c_ = ours(comm);                                                                       \
        if (!c_)                                                                                               \
            return real_ args;                                                                                 \
        bool unit_ = gp_cut_group_depth() == 0;                                                                \
        if (unit_)                                                                                             \
            gp_cut_enter(GP_UNIT_OP, c_);                                                                      \
        else                                                                                                   \
            gp_cut_touch(c_);                                                                                  \
        comm = c_->real;                                                                                       \
        ncclResult_t r_;                                                                                       \
        CALL_REAL(r_, real_ args);                                                                             \
        if (unit_)                                                                                             \
            gp_cut_leave(launched(r_));                                                                        \
        return r_;                                                                                             \
    }
#include "nccl_functions.h"

/* ---- groups: a group opened at depth 0 is one unit ---- */

GP_EXPORT ncclResult_t ncclGroupStart(void)
{
    REAL_OR_FAIL(real, ncclGroupStart, (void));
    if (gp_nccl_inside())
        return real();
    if (gp_cut_group_depth() == 0)
        gp_cut_enter(GP_UNIT_GROUP, NULL);
    gp_cut_group_push();
    ncclResult_t r;
    CALL_REAL(r, real());
    if (r != ncclSuccess && gp_cut_group_pop() == 0)
        gp_cut_leave(false);
    return r;
}

static ncclResult_t group_end(ncclResult_t r, bool launches)
{
    if (gp_cut_group_depth() > 0 && gp_cut_group_pop() == 0)
        gp_cut_leave(launches && launched(r));
    return r;
}

GP_EXPORT ncclResult_t ncclGroupEnd(void)
{
    REAL_OR_FAIL(real, ncclGroupEnd, (void));
    if (gp_nccl_inside())
        return real();
    ncclResult_t r;
    CALL_REAL(r, real());
    return group_end(r, true);
}

GP_EXPORT ncclResult_t ncclGroupSimulateEnd(void *sim)
{
    REAL_OR_FAIL(real, ncclGroupSimulateEnd, (void *));
    if (gp_nccl_inside())
        return real(sim);
    ncclResult_t r;
    CALL_REAL(r, real(sim));
    return group_end(r, false);
}

/* ---- making communicators ---- */

/* Creating or destroying is a unit of its own, unless inside the
 * application's group (already one). */
static bool lifecycle_enter(void)
{
    if (gp_cut_group_depth() > 0)
        return false;
    gp_cut_enter(GP_UNIT_LIFECYCLE, NULL);
    return true;
}

static void lifecycle_leave(bool entered)
{
    if (entered)
        gp_cut_leave(false);
}

/* The device the calling thread works on: NCCL makes communicators there. */
static int current_device(void)
{
    CUdevice dev = -1;
    if (!gp_real_loaded() || GP_REAL(cuCtxGetDevice)(&dev) != CUDA_SUCCESS)
        return -1;
    return dev;
}

/* The handle the application gets for made: the shim's, or NCCL's own when
 * it cannot be recorded (that communicator then cannot be checkpointed). */
static ncclComm_t record(ncclComm_t made, uint64_t key, const void *config, int nranks, int rank, int device, bool multi_device)
{
    struct gp_comm *c = gp_comm_add(made, key, config, nranks, rank, device, multi_device);
    if (!c) {
        GP_ERROR("nccl", "out of memory recording a communicator: it cannot be checkpointed");
        return made;
    }
    GP_DEBUG("nccl", "communicator %016llx: rank %d of %d on device %d", (unsigned long long)key, rank, nranks, device);
    return (ncclComm_t)c;
}

static ncclResult_t init_rank(ncclComm_t *comm, int nranks, ncclUniqueId *ids, int n_ids, int rank, void *config,
                              ncclResult_t (*call)(ncclComm_t *, int, ncclUniqueId *, int, int, void *))
{
    bool entered = lifecycle_enter();
    ncclResult_t r;
    CALL_REAL(r, call(comm, nranks, ids, n_ids, rank, config));
    if (launched(r) && *comm)
        *comm = record(*comm, gp_comm_key_of_ids(ids, n_ids), config, nranks, rank, current_device(), false);
    lifecycle_leave(entered);
    return r;
}

static ncclResult_t call_init_rank_config(ncclComm_t *comm, int nranks, ncclUniqueId *ids, int n, int rank, void *config)
{
    ncclResult_t (*real)(ncclComm_t *, int, ncclUniqueId, int, void *) =
        GP_NCCL_REAL(ncclCommInitRankConfig, (ncclComm_t *, int, ncclUniqueId, int, void *));
    return real ? real(comm, nranks, ids[0], rank, config) : ncclSystemError;
}

static ncclResult_t call_init_rank(ncclComm_t *comm, int nranks, ncclUniqueId *ids, int n, int rank, void *config)
{
    ncclResult_t (*real)(ncclComm_t *, int, ncclUniqueId, int) = GP_NCCL_REAL(ncclCommInitRank, (ncclComm_t *, int, ncclUniqueId, int));
    return real ? real(comm, nranks, ids[0], rank) : ncclSystemError;
}

static ncclResult_t call_init_scalable(ncclComm_t *comm, int nranks, ncclUniqueId *ids, int n, int rank, void *config)
{
    ncclResult_t (*real)(ncclComm_t *, int, int, int, ncclUniqueId *, void *) =
        GP_NCCL_REAL(ncclCommInitRankScalable, (ncclComm_t *, int, int, int, ncclUniqueId *, void *));
    return real ? real(comm, nranks, rank, n, ids, config) : ncclSystemError;
}

GP_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank, void *config)
{
    if (gp_nccl_inside())
        return call_init_rank_config(comm, nranks, &commId, 1, rank, config);
    return init_rank(comm, nranks, &commId, 1, rank, config, call_init_rank_config);
}

GP_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    if (gp_nccl_inside())
        return call_init_rank(comm, nranks, &commId, 1, rank, NULL);
    return init_rank(comm, nranks, &commId, 1, rank, NULL, call_init_rank);
}

GP_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t *comm, int nranks, int myrank, int nId, ncclUniqueId *commIds,
                                                void *config)
{
    if (gp_nccl_inside() || nId < 1)
        return call_init_scalable(comm, nranks, commIds, nId, myrank, config);
    return init_rank(comm, nranks, commIds, nId, myrank, config, call_init_scalable);
}

/* Several ranks in one process: recorded, so that a checkpoint can refuse
 * them by name (a rebuild makes one rank per process). */
GP_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
    REAL_OR_FAIL(real, ncclCommInitAll, (ncclComm_t *, int, const int *));
    if (gp_nccl_inside())
        return real(comms, ndev, devlist);
    bool entered = lifecycle_enter();
    ncclResult_t r;
    CALL_REAL(r, real(comms, ndev, devlist));
    for (int i = 0; r == ncclSuccess && i < ndev; i++) {
        ncclUniqueId local = { { 0 } };
        snprintf(local.internal, sizeof(local.internal), "all:%d:%p", (int)getpid(), (void *)comms[i]);
        comms[i] = record(comms[i], gp_comm_key_of_ids(&local, 1), NULL, ndev, i, devlist ? devlist[i] : i, true);
    }
    lifecycle_leave(entered);
    return r;
}

/* A child's key: its parent's, the split's number, a colour; its rank and
 * size as NCCL says. */
static ncclResult_t record_child(struct gp_comm *parent, uint32_t split, int color, ncclComm_t *newcomm, void *config)
{
    ncclResult_t (*count)(ncclComm_t, int *) = GP_NCCL_REAL(ncclCommCount, (ncclComm_t, int *));
    ncclResult_t (*user_rank)(ncclComm_t, int *) = GP_NCCL_REAL(ncclCommUserRank, (ncclComm_t, int *));
    int nranks = -1, rank = -1;
    gp_nccl_enter_real();
    if (count && user_rank && (count(*newcomm, &nranks) != ncclSuccess || user_rank(*newcomm, &rank) != ncclSuccess))
        nranks = rank = -1; /* still being made (non-blocking): a checkpoint refuses it */
    gp_nccl_leave_real();
    *newcomm = record(*newcomm, gp_comm_key_of_split(parent->key, split, color), config ? config : gp_comm_config(parent), nranks,
                      rank, parent->device, false);
    return ncclSuccess;
}

static uint32_t next_split(struct gp_comm *parent)
{
    pthread_mutex_lock(&gp_comms_lock);
    uint32_t n = parent->splits++;
    pthread_mutex_unlock(&gp_comms_lock);
    return n;
}

GP_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, void *config)
{
    REAL_OR_FAIL(real, ncclCommSplit, (ncclComm_t, int, int, ncclComm_t *, void *));
    struct gp_comm *parent = ours(comm);
    if (!parent)
        return real(comm, color, key, newcomm, config);
    bool entered = lifecycle_enter();
    uint32_t split = next_split(parent);
    ncclResult_t r;
    CALL_REAL(r, real(parent->real, color, key, newcomm, config));
    if (launched(r) && *newcomm)
        record_child(parent, split, color, newcomm, config);
    lifecycle_leave(entered);
    return r;
}

GP_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int *exclude, int count, ncclComm_t *newcomm, void *config, int flags)
{
    REAL_OR_FAIL(real, ncclCommShrink, (ncclComm_t, int *, int, ncclComm_t *, void *, int));
    struct gp_comm *parent = ours(comm);
    if (!parent)
        return real(comm, exclude, count, newcomm, config, flags);
    bool entered = lifecycle_enter();
    uint32_t split = next_split(parent);
    ncclResult_t r;
    CALL_REAL(r, real(parent->real, exclude, count, newcomm, config, flags));
    if (launched(r) && *newcomm)
        record_child(parent, split, INT_MIN, newcomm, config);
    lifecycle_leave(entered);
    return r;
}

/* ---- ending communicators ---- */

/* Finalize, destroy, abort and revoke: on NCCL's communicator if it is up
 * (a torn-down one has nothing left to end); destroy and abort forget it. */
static ncclResult_t end_comm(ncclComm_t comm, ncclResult_t (*real)(ncclComm_t), bool forget)
{
    struct gp_comm *c = ours(comm);
    if (!c)
        return real(comm);
    bool entered = lifecycle_enter();
    ncclResult_t r = ncclSuccess;
    if (c->real)
        CALL_REAL(r, real(c->real));
    if (forget && r == ncclSuccess) {
        pthread_rwlock_wrlock(&gp_comms_life);
        pthread_mutex_lock(&gp_comms_lock);
        gp_comm_remove(c);
        pthread_mutex_unlock(&gp_comms_lock);
        pthread_rwlock_unlock(&gp_comms_life);
    }
    lifecycle_leave(entered);
    return r;
}

GP_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    REAL_OR_FAIL(real, ncclCommFinalize, (ncclComm_t));
    return end_comm(comm, real, false);
}

GP_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    REAL_OR_FAIL(real, ncclCommDestroy, (ncclComm_t));
    return end_comm(comm, real, true);
}

GP_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    REAL_OR_FAIL(real, ncclCommAbort, (ncclComm_t));
    return end_comm(comm, real, true);
}

GP_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int flags)
{
    REAL_OR_FAIL(real, ncclCommRevoke, (ncclComm_t, int));
    struct gp_comm *c = ours(comm);
    if (!c)
        return real(comm, flags);
    ncclResult_t r = ncclSuccess;
    pthread_rwlock_rdlock(&gp_comms_life);
    if (c->real)
        CALL_REAL(r, real(c->real, flags));
    pthread_rwlock_unlock(&gp_comms_life);
    return r;
}

/* ---- questions: NCCL's answer while it is up, the recorded one while it is torn down ---- */

/* While torn down: the int at field of struct gp_comm, or 0 (no error) for field < 0. */
static ncclResult_t ask(ncclComm_t comm, int *out, ncclResult_t (*real)(ncclComm_t, int *), ptrdiff_t field)
{
    struct gp_comm *c = ours(comm);
    if (!c)
        return real(comm, out);
    ncclResult_t r = ncclSuccess;
    pthread_rwlock_rdlock(&gp_comms_life);
    if (c->real)
        CALL_REAL(r, real(c->real, out));
    else
        *out = field < 0 ? ncclSuccess : *(const int *)((const char *)c + field);
    pthread_rwlock_unlock(&gp_comms_life);
    return r;
}

GP_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err)
{
    REAL_OR_FAIL(real, ncclCommGetAsyncError, (ncclComm_t, ncclResult_t *));
    return ask(comm, err, real, -1);
}

GP_EXPORT ncclResult_t ncclCommCount(ncclComm_t comm, int *count)
{
    REAL_OR_FAIL(real, ncclCommCount, (ncclComm_t, int *));
    return ask(comm, count, real, (ptrdiff_t)offsetof(struct gp_comm, nranks));
}

GP_EXPORT ncclResult_t ncclCommCuDevice(ncclComm_t comm, int *device)
{
    REAL_OR_FAIL(real, ncclCommCuDevice, (ncclComm_t, int *));
    return ask(comm, device, real, (ptrdiff_t)offsetof(struct gp_comm, device));
}

GP_EXPORT ncclResult_t ncclCommUserRank(ncclComm_t comm, int *rank)
{
    REAL_OR_FAIL(real, ncclCommUserRank, (ncclComm_t, int *));
    return ask(comm, rank, real, (ptrdiff_t)offsetof(struct gp_comm, rank));
}

GP_EXPORT const char *ncclGetLastError(ncclComm_t comm)
{
    const char *(*real)(ncclComm_t) = (const char *(*)(ncclComm_t))gp_nccl_real("ncclGetLastError");
    if (!real)
        return "gpuckpt: no libnccl is loaded";
    struct gp_comm *c = ours(comm);
    return real(c ? c->real : comm);
}

/* ---- state a rebuild cannot carry: counted, so that a checkpoint refuses it by name ---- */

static void count_on(struct gp_comm *c, uint32_t *field, int delta)
{
    pthread_mutex_lock(&gp_comms_lock);
    if (gp_comm_list_has(c))
        *field += (uint32_t)delta;
    pthread_mutex_unlock(&gp_comms_lock);
}

/* Counted calls: on NCCL's communicator, outside the cut's units. */
#define GP_NCCL_COUNTED(name, params, args, field, delta)                                                      \
    GP_EXPORT ncclResult_t name params                                                                         \
    {                                                                                                          \
        REAL_OR_FAIL(real_, name, params);                                                                     \
        struct gp_comm *c_ = ours(comm);                                                                       \
        if (!c_)                                                                                               \
            return real_ args;                                                                                 \
        ncclResult_t r_;                                                                                       \
        pthread_rwlock_rdlock(&gp_comms_life);                                                                 \
        comm = c_->real;                                                                                       \
        CALL_REAL(r_, comm ? real_ args : ncclInvalidUsage);                                                   \
        pthread_rwlock_unlock(&gp_comms_life);                                                                 \
        if (r_ == ncclSuccess)                                                                                 \
            count_on(c_, &c_->field, delta);                                                                   \
        return r_;                                                                                             \
    }
#include "nccl_functions.h"

GP_EXPORT ncclResult_t ncclMemAlloc(void **ptr, size_t size)
{
    REAL_OR_FAIL(real, ncclMemAlloc, (void **, size_t));
    bool app = !gp_nccl_inside();
    ncclResult_t r = real(ptr, size);
    if (app && r == ncclSuccess)
        gp_comm_note_mem(1);
    return r;
}

GP_EXPORT ncclResult_t ncclMemFree(void *ptr)
{
    REAL_OR_FAIL(real, ncclMemFree, (void *));
    bool app = !gp_nccl_inside();
    ncclResult_t r = real(ptr);
    if (app && r == ncclSuccess)
        gp_comm_note_mem(-1);
    return r;
}
