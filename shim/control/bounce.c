#define _GNU_SOURCE
#include "bounce.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../interpose/contexts.h"
#include "../interpose/driver_error.h"
#include "../interpose/log.h"
#include "../interpose/real_driver.h"
#include "gpuckpt_protocol.h"
#include "prefault.h"

/* Two 8 MiB slots per worker, at most 32 slots (256 MiB pinned, which
 * must be faulted in first: on a fresh H200 host, 4.5 GB/s). On an H200
 * host, 16 GiB out took 1.42 s with 4 workers, 0.87 s with 8, 0.74 s with
 * 12 and 0.65 s with 16; 16, 32 and 64 MiB slots were within 10 %. The
 * workers' memcpy into memory fresh from the kernel (faulted in and zeroed
 * as it is written) is what a first suspend waits for, so there are as
 * many as the host has cores, up to 32; a worker holds a slot for 3 ms of
 * its 8 MiB, the DMA fills one in 0.15 ms, and 32 slots keep both going. */
#define SLOT_BYTES (8ull << 20)
#define MAX_WORKERS 32
#define MAX_SLOTS 32
/* A slot carries pieces of several spans of one device, end to end: a pool
 * whose zero blocks are left out is copied as many short spans (the
 * benchmark's: 512 KiB between 256 KiB of zeros), and one slot each would
 * cost a slot's hand-offs per half MiB. */
#define MAX_PARTS 32

enum slot_state {
    SLOT_FREE,    /* holds nothing of the copy */
    SLOT_DMA,     /* a DMA into it (to host) or out of it (to device) is queued */
    SLOT_TO_HOST, /* to host: its DMA is done, a worker is to copy it out */
    SLOT_TO_RING, /* to device: a worker is to fill it */
    SLOT_MOVING,  /* a worker's memcpy runs on it */
    SLOT_FILLED,  /* to device: filled, its DMA not queued yet */
};

/* One piece of a span in a slot, at the slot's byte offset at. */
struct part {
    CUdeviceptr dev;
    uint8_t *host;
    uint64_t len;
    uint64_t at;
};

struct slot {
    enum slot_state state;
    uint64_t ticket; /* the piece of the copy it holds: workers take the oldest first */
    int device;
    CUstream stream;
    struct part parts[MAX_PARTS];
    uint32_t nparts;
    uint64_t len; /* of all parts */
    CUevent done[GPCK_MAX_DEVICES]; /* per device: an event belongs to one context */
};

struct gp_bounce {
    uint8_t *ring;
    uint64_t ring_bytes;
    bool pinned;
    int device; /* whose context pinned the ring */
    uint32_t nslots;
    struct slot *slots;
    int max_workers;
    bool no_batch; /* the driver refused a batch copy: a call per part from then on */
    pthread_mutex_t lock;
    pthread_cond_t changed;
    /* One copy at a time: */
    bool to_host;
    bool stop;
    int current_device; /* whose primary context the calling thread has current; -1 unknown */
    int nworkers;
    pthread_t workers[MAX_WORKERS];
};

/* The spans of a copy, cut into pieces of at most one slot. */
struct cursor {
    const struct gp_bounce_span *spans;
    uint32_t count;
    uint32_t i;
    uint64_t off;
};

/* The span at the cursor, past empty ones; NULL at the end. */
static const struct gp_bounce_span *cursor_span(struct cursor *c)
{
    while (c->i < c->count && c->off >= c->spans[c->i].len) {
        c->i++;
        c->off = 0;
    }
    return c->i < c->count ? &c->spans[c->i] : NULL;
}

/* Fills s with the next pieces, up to a slot's bytes, of spans of one
 * device and stream; false when none are left. */
static bool next_piece(struct cursor *c, struct slot *s)
{
    const struct gp_bounce_span *sp = cursor_span(c);
    if (!sp)
        return false;
    s->device = sp->device;
    s->stream = sp->stream;
    s->nparts = 0;
    s->len = 0;
    while (sp && s->nparts < MAX_PARTS && s->len < SLOT_BYTES && sp->device == s->device && sp->stream == s->stream) {
        uint64_t n = sp->len - c->off < SLOT_BYTES - s->len ? sp->len - c->off : SLOT_BYTES - s->len;
        s->parts[s->nparts++] = (struct part){ .dev = sp->dev + c->off, .host = sp->host + c->off, .len = n, .at = s->len };
        s->len += n;
        c->off += n;
        sp = cursor_span(c);
    }
    return true;
}

static uint8_t *slot_memory(const struct gp_bounce *b, const struct slot *s)
{
    return b->ring + (uint64_t)(s - b->slots) * SLOT_BYTES;
}

static bool all_free(const struct gp_bounce *b)
{
    for (uint32_t i = 0; i < b->nslots; i++)
        if (b->slots[i].state != SLOT_FREE)
            return false;
    return true;
}

/* ---- workers: the memcpy side ---- */

static struct slot *oldest_waiting(struct gp_bounce *b)
{
    enum slot_state want = b->to_host ? SLOT_TO_HOST : SLOT_TO_RING;
    struct slot *best = NULL;
    for (uint32_t i = 0; i < b->nslots; i++)
        if (b->slots[i].state == want && (!best || b->slots[i].ticket < best->ticket))
            best = &b->slots[i];
    return best;
}

static void *worker_main(void *arg)
{
    struct gp_bounce *b = arg;
    pthread_mutex_lock(&b->lock);
    for (;;) {
        struct slot *s;
        while (!(s = oldest_waiting(b)) && !b->stop)
            pthread_cond_wait(&b->changed, &b->lock);
        if (!s)
            break;
        s->state = SLOT_MOVING;
        pthread_mutex_unlock(&b->lock);
        for (uint32_t k = 0; k < s->nparts; k++) {
            const struct part *p = &s->parts[k];
            if (b->to_host)
                memcpy(p->host, slot_memory(b, s) + p->at, p->len);
            else
                memcpy(slot_memory(b, s) + p->at, p->host, p->len);
        }
        pthread_mutex_lock(&b->lock);
        s->state = b->to_host ? SLOT_FREE : SLOT_FILLED;
        pthread_cond_broadcast(&b->changed);
    }
    pthread_mutex_unlock(&b->lock);
    return NULL;
}

static int start_workers(struct gp_bounce *b, bool to_host)
{
    b->to_host = to_host;
    b->stop = false;
    b->nworkers = 0;
    for (int i = 0; i < b->max_workers; i++)
        if (pthread_create(&b->workers[b->nworkers], NULL, worker_main, b) == 0)
            b->nworkers++;
    return b->nworkers ? 0 : -EAGAIN;
}

static void stop_workers(struct gp_bounce *b)
{
    pthread_mutex_lock(&b->lock);
    b->stop = true;
    pthread_cond_broadcast(&b->changed);
    pthread_mutex_unlock(&b->lock);
    for (int i = 0; i < b->nworkers; i++)
        pthread_join(b->workers[i], NULL);
    b->nworkers = 0;
}

/* ---- the calling thread: the DMA side ---- */

static int use_device(struct gp_bounce *b, int device)
{
    if (b->current_device == device)
        return 0;
    CUresult cu = CUDA_SUCCESS;
    int err = gp_contexts_use_primary(device, &cu);
    b->current_device = err ? -1 : device;
    return err;
}

/* A slot's parts in one call where the driver has the batch copy (CUDA
 * 12.8 and later): 512 KiB spans (a pool without its zero blocks) left an
 * H200 at 54 GB/s as batches, at 43 GB/s as a call each, from any number
 * of streams or threads (test/gpu/probes/copy_spans.c). A driver that
 * says it cannot batch gets a call per part from then on. */
static CUresult dma_parts(struct gp_bounce *b, const struct slot *s)
{
    uint8_t *mem = slot_memory(b, s);
    if (!b->no_batch && gp_real[GP_IDX_cuMemcpyBatchAsync_v2]) {
        CUdeviceptr dsts[MAX_PARTS], srcs[MAX_PARTS];
        size_t sizes[MAX_PARTS], first = 0;
        CUmemcpyAttributes attr = { .srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM };
        for (uint32_t k = 0; k < s->nparts; k++) {
            CUdeviceptr ring = (CUdeviceptr)(uintptr_t)(mem + s->parts[k].at);
            dsts[k] = b->to_host ? ring : s->parts[k].dev;
            srcs[k] = b->to_host ? s->parts[k].dev : ring;
            sizes[k] = s->parts[k].len;
        }
        CUresult cu = GP_REAL(cuMemcpyBatchAsync_v2)(dsts, srcs, sizes, s->nparts, &attr, &first, 1, s->stream);
        if (cu != CUDA_ERROR_NOT_SUPPORTED)
            return gp_driver_error_note("cuMemcpyBatchAsync_v2", cu);
        b->no_batch = true;
        GP_INFO("bounce", "the driver copies no batches: a call per span");
    }
    CUresult cu = CUDA_SUCCESS;
    for (const struct part *p = s->parts; p < s->parts + s->nparts && cu == CUDA_SUCCESS; p++)
        cu = b->to_host ? GP_CALL(cuMemcpyDtoHAsync_v2, mem + p->at, p->dev, p->len, s->stream)
                        : GP_CALL(cuMemcpyHtoDAsync_v2, p->dev, mem + p->at, p->len, s->stream);
    return cu;
}

/* Queues s's DMA and an event after it. */
static int queue_dma(struct gp_bounce *b, struct slot *s)
{
    CUresult cu = CUDA_SUCCESS;
    CUevent *ev = &s->done[s->device];
    if (use_device(b, s->device))
        cu = CUDA_ERROR_INVALID_CONTEXT;
    else if (!*ev && (cu = GP_CALL(cuEventCreate, ev, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS)
        *ev = NULL;
    if (cu == CUDA_SUCCESS)
        cu = dma_parts(b, s);
    if (cu == CUDA_SUCCESS)
        cu = GP_CALL(cuEventRecord, *ev, s->stream);
    if (cu == CUDA_SUCCESS)
        return 0;
    GP_ERROR("bounce", "copy %s 0x%llx+%llu (%u parts) failed (CUresult %d)", b->to_host ? "out" : "in",
             (unsigned long long)s->parts[0].dev, (unsigned long long)s->len, s->nparts, (int)cu);
    return -EIO;
}

static int wait_dma(struct slot *s)
{
    CUresult cu = GP_CALL(cuEventSynchronize, s->done[s->device]);
    if (cu == CUDA_SUCCESS)
        return 0;
    GP_ERROR("bounce", "waiting for the copy of 0x%llx+%llu failed (CUresult %d)", (unsigned long long)s->parts[0].dev,
             (unsigned long long)s->len, (int)cu);
    return -EIO;
}

/* queue_dma and wait_dma for a caller holding the lock: the CUDA call
 * runs without it, so the workers go on meanwhile. */
static int queue_dma_unlocked(struct gp_bounce *b, struct slot *s)
{
    pthread_mutex_unlock(&b->lock);
    int err = queue_dma(b, s);
    pthread_mutex_lock(&b->lock);
    return err;
}

static int wait_dma_unlocked(struct gp_bounce *b, struct slot *s)
{
    pthread_mutex_unlock(&b->lock);
    int err = wait_dma(s);
    pthread_mutex_lock(&b->lock);
    return err;
}

/* Device to host: DMA into the next free slot, in order; a worker copies
 * each slot out once its DMA is done. After a failure nothing more is
 * queued and what is queued drains. */
static int copy_out(struct gp_bounce *b, struct cursor *cur)
{
    int err = 0;
    bool more = true;
    uint64_t issued = 0, synced = 0;
    pthread_mutex_lock(&b->lock);
    for (;;) {
        struct slot *s = &b->slots[issued % b->nslots];
        if (more && !err && s->state == SLOT_FREE) {
            if (!next_piece(cur, s)) {
                more = false;
                continue;
            }
            s->ticket = issued;
            s->state = SLOT_DMA;
            int e = queue_dma_unlocked(b, s);
            if (e) {
                err = e;
                s->state = SLOT_FREE;
            } else {
                issued++;
            }
            continue;
        }
        if (synced < issued) {
            struct slot *d = &b->slots[synced % b->nslots];
            int e = wait_dma_unlocked(b, d);
            err = err ? err : e;
            d->state = err ? SLOT_FREE : SLOT_TO_HOST; /* after a failure its bytes are not wanted */
            synced++;
            pthread_cond_broadcast(&b->changed);
            continue;
        }
        if ((!more || err) && all_free(b))
            break;
        pthread_cond_wait(&b->changed, &b->lock);
    }
    pthread_mutex_unlock(&b->lock);
    return err;
}

/* Host to device: workers fill free slots in order; each filled slot's DMA
 * is queued in order, and the slot is free again once that DMA is done. */
static int copy_in(struct gp_bounce *b, struct cursor *cur)
{
    int err = 0;
    bool more = true;
    uint64_t assigned = 0, issued = 0, synced = 0;
    pthread_mutex_lock(&b->lock);
    for (;;) {
        struct slot *f = &b->slots[assigned % b->nslots];
        if (more && !err && f->state == SLOT_FREE) {
            if (!next_piece(cur, f)) {
                more = false;
                continue;
            }
            f->ticket = assigned++;
            f->state = SLOT_TO_RING;
            pthread_cond_broadcast(&b->changed);
            continue;
        }
        struct slot *q = &b->slots[issued % b->nslots];
        if (issued < assigned && q->state == SLOT_FILLED) {
            int e = 0;
            if (!err) {
                q->state = SLOT_DMA;
                e = queue_dma_unlocked(b, q);
            }
            err = err ? err : e;
            if (err)
                q->state = SLOT_FREE; /* filled but never queued: nothing to wait for */
            issued++;
            continue;
        }
        while (synced < issued && b->slots[synced % b->nslots].state != SLOT_DMA)
            synced++; /* skipped after a failure */
        if (synced < issued) {
            struct slot *d = &b->slots[synced % b->nslots];
            int e = wait_dma_unlocked(b, d);
            err = err ? err : e;
            d->state = SLOT_FREE;
            synced++;
            continue;
        }
        if ((!more || err) && all_free(b))
            break;
        pthread_cond_wait(&b->changed, &b->lock);
    }
    pthread_mutex_unlock(&b->lock);
    return err;
}

/* After a failure, waits for every stream the copy used: a DMA queued
 * without its event (the record failed), or one whose wait failed, must
 * not go on writing into the ring or the pool after the copy returns. */
static void drain_streams(const struct gp_bounce_span *spans, uint32_t count)
{
    for (uint32_t i = 0; i < count; i++) {
        bool seen = !spans[i].len; /* an empty span queued nothing */
        for (uint32_t j = 0; j < i && !seen; j++)
            seen = spans[j].len && spans[j].stream == spans[i].stream;
        if (!seen) /* a stream names its context: none need be current */
            GP_REAL(cuStreamSynchronize)(spans[i].stream);
    }
}

int gp_bounce_copy(struct gp_bounce *b, bool to_host, const struct gp_bounce_span *spans, uint32_t count)
{
    struct cursor cur = { .spans = spans, .count = count };
    int err = start_workers(b, to_host);
    if (err)
        return err;
    b->current_device = -1;
    err = to_host ? copy_out(b, &cur) : copy_in(b, &cur);
    stop_workers(b);
    if (err)
        drain_streams(spans, count);
    return err;
}

int gp_bounce_create(int device, struct gp_bounce **out)
{
    *out = NULL;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int workers = cpus < 1 ? 1 : cpus > MAX_WORKERS ? MAX_WORKERS : (int)cpus;
    struct gp_bounce *b = calloc(1, sizeof(*b));
    unsigned nslots = 2u * (unsigned)workers < MAX_SLOTS ? 2u * (unsigned)workers : MAX_SLOTS;
    if (!b || !(b->slots = calloc(nslots, sizeof(struct slot)))) {
        free(b);
        return -ENOMEM;
    }
    b->max_workers = workers;
    b->nslots = nslots;
    b->ring_bytes = b->nslots * SLOT_BYTES;
    b->device = device;
    b->ring = mmap(NULL, b->ring_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b->ring == MAP_FAILED) {
        int err = -errno;
        free(b->slots);
        free(b);
        return err;
    }
    madvise(b->ring, b->ring_bytes, MADV_HUGEPAGE); /* a hint: fewer faults, */
    /* all taken here, from several threads, rather than by the pinning (one
     * thread zeroed the 256 MiB in most of the 0.04-0.05 s the ring took) */
    gp_prefault_end(gp_prefault_start(b->ring, b->ring_bytes, workers < 8 ? workers : 8), true);
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->changed, NULL);
    CUresult cu = CUDA_SUCCESS;
    if (device >= 0 && gp_contexts_use_primary(device, &cu) == 0) /* -1: no GPU memory, nothing to pin for */
        cu = GP_REAL(cuMemHostRegister_v2)(b->ring, b->ring_bytes, CU_MEMHOSTREGISTER_PORTABLE);
    b->pinned = device >= 0 && cu == CUDA_SUCCESS;
    if (!b->pinned && device >= 0) /* still correct, at the speed of pageable memory */
        GP_WARN("bounce", "the %llu MiB ring could not be pinned (CUresult %d)",
                (unsigned long long)(b->ring_bytes >> 20), (int)cu);
    *out = b;
    return 0;
}

void gp_bounce_destroy(struct gp_bounce *b)
{
    if (!b)
        return;
    CUresult cu = CUDA_SUCCESS;
    for (int d = 0; d < (int)GPCK_MAX_DEVICES; d++)
        for (uint32_t i = 0; i < b->nslots; i++)
            if (b->slots[i].done[d]) /* needs no current context */
                GP_REAL(cuEventDestroy_v2)(b->slots[i].done[d]);
    if (b->pinned && gp_contexts_use_primary(b->device, &cu) == 0)
        GP_REAL(cuMemHostUnregister)(b->ring);
    munmap(b->ring, b->ring_bytes);
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->changed);
    free(b->slots);
    free(b);
}
