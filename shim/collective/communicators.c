#define _GNU_SOURCE
#include "communicators.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../interpose/log.h"

pthread_mutex_t gp_comms_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_rwlock_t gp_comms_life = PTHREAD_RWLOCK_INITIALIZER;

static struct gp_comm *comms;
static uint32_t next_seq;
static long mem_allocations;

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t gp_comm_key_of_ids(const ncclUniqueId *ids, int n)
{
    return fnv1a(0xcbf29ce484222325ull, ids, (size_t)n * sizeof(*ids));
}

uint64_t gp_comm_key_of_split(uint64_t parent, uint32_t split, int color)
{
    uint64_t h = fnv1a(0xcbf29ce484222325ull, &parent, sizeof(parent));
    h = fnv1a(h, &split, sizeof(split));
    return fnv1a(h, &color, sizeof(color));
}

/* The strings a config points to are the caller's: the copy points to its own. */
static void copy_config(struct gp_comm *c, const void *config)
{
    const gp_nccl_config_head *head = config;
    size_t n = head->size < GP_NCCL_CONFIG_MAX ? head->size : GP_NCCL_CONFIG_MAX;
    memcpy(c->config, config, n);
    gp_nccl_config_head *mine = (gp_nccl_config_head *)c->config;
    if (n >= offsetof(gp_nccl_config_head, netName) + sizeof(char *) && head->netName) {
        snprintf(c->net_name, sizeof(c->net_name), "%s", head->netName);
        mine->netName = c->net_name;
    }
    if (n >= offsetof(gp_nccl_config_head, commName) + sizeof(char *) && head->commName) {
        snprintf(c->comm_name, sizeof(c->comm_name), "%s", head->commName);
        mine->commName = c->comm_name;
    }
    c->has_config = true;
}

struct gp_comm *gp_comm_add(ncclComm_t real, uint64_t key, const void *config, int nranks, int rank, int device, bool multi_device)
{
    struct gp_comm *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->real = real;
    c->key = key;
    c->nranks = nranks;
    c->rank = rank;
    c->device = device;
    c->multi_device = multi_device;
    if (config)
        copy_config(c, config);
    pthread_mutex_lock(&gp_comms_lock);
    c->seq = next_seq++;
    c->next = comms;
    comms = c;
    pthread_mutex_unlock(&gp_comms_lock);
    return c;
}

struct gp_comm *gp_comm_find(ncclComm_t h)
{
    return gp_comm_list_has((const struct gp_comm *)h) ? (struct gp_comm *)h : NULL;
}

void gp_comm_remove(struct gp_comm *c)
{
    for (struct gp_comm **p = &comms; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            free(c);
            return;
        }
    }
}

bool gp_comm_list_has(const struct gp_comm *c)
{
    for (struct gp_comm *o = comms; o; o = o->next)
        if (o == c)
            return true;
    return false;
}

struct gp_comm *gp_comm_list(void)
{
    return comms;
}

void *gp_comm_config(struct gp_comm *c)
{
    return c->has_config ? c->config : NULL;
}

void gp_comm_note_mem(long delta)
{
    pthread_mutex_lock(&gp_comms_lock);
    mem_allocations += delta;
    pthread_mutex_unlock(&gp_comms_lock);
}

long gp_comm_mem_allocations(void)
{
    return mem_allocations;
}
