/* The communicators the application holds. It is handed a handle of the
 * shim's (a struct gp_comm) instead of NCCL's own, so that NCCL's
 * communicator can be destroyed before a checkpoint and made again after
 * it (rebuild.h) while the application keeps the same handle.
 *
 * Each has a key that names it the same in every process of the job: a
 * hash of the unique id its ranks were made from, or, for one split off
 * another, of its parent's key, the split's number and its colour. */
#ifndef GPUCKPT_COMMUNICATORS_H
#define GPUCKPT_COMMUNICATORS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "nccl_api.h"

#define GP_NCCL_CONFIG_MAX 512

struct gp_comm {
    ncclComm_t real;     /* NCCL's; NULL while torn down */
    uint64_t key;
    int nranks, rank, device;
    uint64_t ops;        /* units of the cut completed on it (cut.h) */
    uint32_t inflight;   /* units under way that will count on it */
    uint64_t target;     /* while the cut holds: units pass while ops < target */
    uint32_t splits;     /* communicators split off it so far */
    uint32_t registrations, windows, custom_ops; /* state a rebuild cannot carry */
    bool multi_device;   /* one of several ranks of this process (ncclCommInitAll) */
    bool has_config;
    uint32_t seq;        /* creation order */
    unsigned char config[GP_NCCL_CONFIG_MAX];
    char net_name[64];
    char comm_name[128];
    struct gp_comm *next;
};

/* Everything below is guarded by this lock (cut.c waits on it too). */
extern pthread_mutex_t gp_comms_lock;
/* Held for reading around calls on a real communicator outside the cut's
 * units (queries), for writing while one is destroyed or replaced. */
extern pthread_rwlock_t gp_comms_life;

/* A new handle for real, made by this process's rank `rank` of `nranks` on
 * device. config (may be NULL) is copied for the rebuild. Takes the lock;
 * NULL when out of memory. */
struct gp_comm *gp_comm_add(ncclComm_t real, uint64_t key, const void *config, int nranks, int rank, int device, bool multi_device);
/* The handle h stands for, or NULL when h is not one of the shim's.
 * Call with the lock held. */
struct gp_comm *gp_comm_find(ncclComm_t h);
/* Forgets c (the application destroyed it). Call with the lock held. */
void gp_comm_remove(struct gp_comm *c);
/* c is still one of the shim's. Call with the lock held. */
bool gp_comm_list_has(const struct gp_comm *c);
/* The head of the list, newest first. Call with the lock held. */
struct gp_comm *gp_comm_list(void);
/* The config to make c again with (NULL: NCCL's defaults). */
void *gp_comm_config(struct gp_comm *c);

/* Keys: of a unique id (or ids), of a split. */
uint64_t gp_comm_key_of_ids(const ncclUniqueId *ids, int n);
uint64_t gp_comm_key_of_split(uint64_t parent, uint32_t split, int color);

/* ncclMemAlloc'd bytes outstanding (memory NCCL maps to peers, which no
 * rebuild can carry). */
void gp_comm_note_mem(long delta_allocations);
long gp_comm_mem_allocations(void);

#endif
