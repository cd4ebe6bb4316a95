#define _GNU_SOURCE
#include "prefault.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Small enough that a stop waits little, large enough for whole huge pages. */
#define PIECE (32ull << 20)
#define MAX_THREADS 32

struct gp_prefault {
    uint8_t *base;
    uint64_t size;
    atomic_uint_fast64_t next; /* offset of the next piece a thread takes */
    atomic_bool stop;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    bool go;
    int nthreads;
    pthread_t threads[MAX_THREADS];
};

/* Threads start together: a thread's stack is mapped under the process's
 * mmap lock, which faulting in holds (for reading) a piece at a time. */
static void wait_for_go(struct gp_prefault *p)
{
    pthread_mutex_lock(&p->lock);
    while (!p->go)
        pthread_cond_wait(&p->changed, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

void gp_populate(uint8_t *p, uint64_t n)
{
    if (madvise(p, n, MADV_POPULATE_WRITE) == 0)
        return;
    long page = sysconf(_SC_PAGESIZE);
    for (uint64_t i = 0; i < n; i += (uint64_t)page) /* kernels before 5.14 */
        __atomic_fetch_or(p + i, 0, __ATOMIC_RELAXED);
}

static void *prefault_pieces(void *arg)
{
    struct gp_prefault *p = arg;
    wait_for_go(p);
    while (!atomic_load_explicit(&p->stop, memory_order_relaxed)) {
        uint64_t off = atomic_fetch_add(&p->next, PIECE);
        if (off >= p->size)
            break;
        gp_populate(p->base + off, p->size - off < PIECE ? p->size - off : PIECE);
    }
    return NULL;
}

struct gp_prefault *gp_prefault_start(uint8_t *base, uint64_t size, int threads)
{
    struct gp_prefault *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->base = base;
    p->size = size;
    atomic_init(&p->next, 0);
    atomic_init(&p->stop, false);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->changed, NULL);
    uint64_t pieces = (size + PIECE - 1) / PIECE;
    int want = threads < MAX_THREADS ? threads : MAX_THREADS;
    if ((uint64_t)want > pieces)
        want = (int)pieces;
    for (int i = 0; i < want; i++)
        if (pthread_create(&p->threads[p->nthreads], NULL, prefault_pieces, p) == 0)
            p->nthreads++;
    pthread_mutex_lock(&p->lock);
    p->go = true;
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->lock);
    if (p->nthreads)
        return p;
    gp_prefault_end(p, false);
    return NULL;
}

void gp_prefault_end(struct gp_prefault *p, bool finish)
{
    if (!p)
        return;
    if (!finish)
        atomic_store(&p->stop, true);
    for (int i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->changed);
    free(p);
}
