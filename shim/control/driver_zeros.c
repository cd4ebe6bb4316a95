#define _GNU_SOURCE
#include "driver_zeros.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../interpose/driver_mappings.h"
#include "../interpose/proc_maps.h"

/* Pieces a thread takes at a time; whole huge pages. */
#define PIECE (8ul << 20)
#define THREADS 8
#define MAX_SEGMENTS 256

struct scan {
    const struct gp_mapping *m;
    unsigned n;
    atomic_uint_fast64_t next; /* the next piece, as an offset into the mappings laid end to end */
    uint64_t total;
    uint64_t page; /* the kernel's: a run dropped starts and ends on one */
    atomic_uint_fast64_t dropped;
    atomic_int err;
};

static bool page_is_zero(const uint64_t *w, uint64_t page)
{
    uint64_t acc = 0;
    for (uint64_t i = 0; i < page / 8; i += 8) {
        acc |= w[i] | w[i + 1] | w[i + 2] | w[i + 3] | w[i + 4] | w[i + 5] | w[i + 6] | w[i + 7];
        if (acc)
            return false;
    }
    return true;
}

/* Drops the zero pages of [p, p + len): one madvise per run of them. */
static void drop_piece(struct scan *s, uint8_t *p, uint64_t len)
{
    uint8_t *run = NULL;
    uint64_t dropped = 0;
    for (uint64_t off = 0; off <= len; off += s->page) {
        bool zero = off < len && page_is_zero((const uint64_t *)(p + off), s->page);
        if (zero && !run)
            run = p + off;
        if (!zero && run) {
            /* Refused (locked memory): those pages stay, the rest goes on. */
            if (madvise(run, (size_t)(p + off - run), MADV_DONTNEED) == 0)
                dropped += (uint64_t)(p + off - run);
            else
                atomic_store(&s->err, -errno);
            run = NULL;
        }
    }
    atomic_fetch_add(&s->dropped, dropped);
}

static void *scan_pieces(void *arg)
{
    struct scan *s = arg;
    for (;;) {
        uint64_t at = atomic_fetch_add(&s->next, PIECE);
        if (at >= s->total)
            return NULL;
        uint64_t end = at + PIECE < s->total ? at + PIECE : s->total;
        /* The piece may span mappings: each part on its own. */
        uint64_t base = 0;
        for (unsigned i = 0; i < s->n && at < end; i++) {
            uint64_t lo = base, hi = base + s->m[i].len;
            base = hi;
            if (at >= hi)
                continue;
            uint64_t stop = end < hi ? end : hi;
            drop_piece(s, (uint8_t *)s->m[i].lo + (at - lo), stop - at);
            at = stop;
        }
    }
}

struct readable {
    const struct gp_mapping *m;
    unsigned n;
    struct gp_mapping *out;
    unsigned k;
};

static int readable_part(const struct gp_maps_line *l, void *arg)
{
    struct readable *r = arg;
    bool anon = l->inode == 0 && (!l->path[0] || !strncmp(l->path, "[anon:", 6));
    if (!anon || l->shared || l->prot != (PROT_READ | PROT_WRITE))
        return 0;
    for (unsigned i = 0; i < r->n && r->k < MAX_SEGMENTS; i++) {
        uintptr_t a = r->m[i].lo > l->lo ? r->m[i].lo : l->lo;
        uintptr_t b = r->m[i].lo + r->m[i].len < l->hi ? r->m[i].lo + r->m[i].len : l->hi;
        if (a < b)
            r->out[r->k++] = (struct gp_mapping){ a, b - a };
    }
    return r->k == MAX_SEGMENTS; /* full: the rest is not scanned */
}

/* The parts of the records that are private anonymous memory, readable
 * and writable now: the driver also maps reservations without access and
 * changes protections and mappings by other means than the interposed
 * calls, and a page without access cannot be read. */
static unsigned readable_parts(const struct gp_mapping *m, unsigned n, struct gp_mapping *out)
{
    struct readable r = { m, n, out, 0 };
    gp_maps_each(readable_part, &r); /* unreadable: nothing scanned */
    return r.k;
}

static int drop_recorded(const struct gp_mapping *recorded, unsigned nrecorded, void *arg)
{
    struct gp_zero_drop *out = arg;
    struct gp_mapping m[MAX_SEGMENTS];
    unsigned n = readable_parts(recorded, nrecorded, m);
    struct scan s = { .m = m, .n = n, .page = (uint64_t)sysconf(_SC_PAGESIZE) };
    for (unsigned i = 0; i < n; i++)
        s.total += m[i].len;
    out->mappings = nrecorded;
    out->scanned = s.total;
    pthread_t t[THREADS];
    int started = 0;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int want = (int)(s.total / (64ul << 20)) + 1;
    if (want > THREADS)
        want = THREADS;
    if (cpus > 0 && want > cpus)
        want = (int)cpus;
    while (started < want - 1 && pthread_create(&t[started], NULL, scan_pieces, &s) == 0)
        started++;
    scan_pieces(&s);
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    out->dropped = atomic_load(&s.dropped);
    return atomic_load(&s.err);
}

int gp_drop_driver_zeros(struct gp_zero_drop *out)
{
    memset(out, 0, sizeof(*out));
    int err = gp_driver_mappings_with(drop_recorded, out);
    gp_driver_mappings_watch(false);
    return err;
}
