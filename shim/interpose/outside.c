#define _GNU_SOURCE
#include "outside.h"

#include <pthread.h>
#include <stdlib.h>

/* A chained hash table: such allocations are few and rarely freed in hot
 * loops, so one lock is enough. */
#define BUCKETS 1024

struct entry {
    struct entry *next;
    uint64_t ptr, size;
    enum gp_outside_kind kind;
};

static struct entry *buckets[BUCKETS];
static uint64_t totals[GP_OUT_KINDS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static size_t bucket_of(uint64_t p)
{
    return (size_t)((p >> 9) * 0x9E3779B97F4A7C15ull >> 54) & (BUCKETS - 1);
}

void gp_outside_add(uint64_t ptr, uint64_t size, enum gp_outside_kind kind)
{
    struct entry *e = malloc(sizeof(*e));
    pthread_mutex_lock(&lock);
    totals[kind] += size;
    if (e) {
        *e = (struct entry){ buckets[bucket_of(ptr)], ptr, size, kind };
        buckets[bucket_of(ptr)] = e;
    }
    pthread_mutex_unlock(&lock);
}

int gp_outside_remove(uint64_t ptr)
{
    pthread_mutex_lock(&lock);
    for (struct entry **pp = &buckets[bucket_of(ptr)]; *pp; pp = &(*pp)->next) {
        if ((*pp)->ptr != ptr)
            continue;
        struct entry *e = *pp;
        *pp = e->next;
        totals[e->kind] -= e->size;
        pthread_mutex_unlock(&lock);
        free(e);
        return 1;
    }
    pthread_mutex_unlock(&lock);
    return 0;
}

uint64_t gp_outside_bytes(enum gp_outside_kind kind)
{
    pthread_mutex_lock(&lock);
    uint64_t v = totals[kind];
    pthread_mutex_unlock(&lock);
    return v;
}
