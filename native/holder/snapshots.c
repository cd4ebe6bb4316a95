/* The snapshots a holder keeps: see snapshots.h. */
#define _GNU_SOURCE
#include "snapshots.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gpuckpt_protocol.h"
#include "../common/proc_stat.h"

struct part {
    int *fds;
    uint32_t count, cap;
    uint64_t bytes; /* of GPU memory behind the fds */
    uint8_t uuid[16];
};

struct snapshot {
    uint64_t id, start_time, created_ms;
    int32_t pid;
    bool complete;
    bool keep; /* GPCK_HOLD_KEEP: a pool's only copy, never reclaimed */
    int creator; /* the connection handing it over, until complete */
    uint32_t parts;
    struct part part[GPCK_MAX_DEVICES];
};

static struct snapshot *snaps;
static size_t nsnaps, capsnaps;
static uint64_t next_id = 1;

uint64_t holder_now_ms(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "gpuckpt-snapshot-holder[%d]: ", (int)getpid());
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static uint64_t snapshot_bytes(const struct snapshot *s)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < s->parts; i++)
        n += s->part[i].bytes;
    return n;
}

static struct snapshot *find(uint64_t id)
{
    for (size_t i = 0; i < nsnaps; i++)
        if (snaps[i].id == id)
            return &snaps[i];
    return NULL;
}

/* Closes the snapshot's fds (its memory goes back to its GPUs) and forgets it. */
static void drop(struct snapshot *s, const char *why)
{
    say("let snapshot %llu of process %d go (%llu MiB): %s", (unsigned long long)s->id, (int)s->pid,
        (unsigned long long)(snapshot_bytes(s) >> 20), why);
    for (uint32_t i = 0; i < s->parts; i++) {
        for (uint32_t k = 0; k < s->part[i].count; k++)
            close(s->part[i].fds[k]);
        free(s->part[i].fds);
    }
    *s = snaps[--nsnaps];
}

/* ------------------------------------------------------------ messages -- */

static const void *payload_of(const struct request *r, size_t size)
{
    return r->len == size ? r->payload : NULL;
}

static int handle_hold_put(struct request *r)
{
    const struct gpck_hold_put_req *q = payload_of(r, sizeof(*q));
    struct gpck_hold_rep *rep = r->reply;
    if (!q || q->part >= GPCK_MAX_DEVICES)
        return -EPROTO;
    struct snapshot *s;
    if (!q->id) {
        if (q->part || q->first || !q->start_time)
            return -EINVAL;
        if (nsnaps == capsnaps) {
            size_t cap = capsnaps ? 2 * capsnaps : 8;
            struct snapshot *grown = realloc(snaps, cap * sizeof(*grown));
            if (!grown)
                return -ENOMEM;
            snaps = grown;
            capsnaps = cap;
        }
        s = &snaps[nsnaps++];
        *s = (struct snapshot){ .id = next_id++, .start_time = q->start_time, .created_ms = holder_now_ms(CLOCK_REALTIME),
                                .pid = q->pid, .keep = (q->flags & GPCK_HOLD_KEEP) != 0, .creator = r->client };
    } else if (!(s = find(q->id)) || s->complete || s->pid != q->pid || s->creator != r->client) {
        return -ENOENT;
    }
    /* Parts in order, each from first 0 on. */
    if (q->part == s->parts && q->first == 0 && s->parts < GPCK_MAX_DEVICES) {
        s->part[s->parts] = (struct part){ 0 };
        memcpy(s->part[s->parts].uuid, q->uuid, 16);
        s->parts++;
    }
    struct part *p = &s->part[q->part];
    if (q->part + 1 != s->parts || q->first != p->count)
        return -EINVAL;
    if (p->count + r->nfds > p->cap) {
        uint32_t cap = p->cap ? p->cap : 64;
        while (cap < p->count + r->nfds)
            cap *= 2;
        int *grown = realloc(p->fds, cap * sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        p->fds = grown;
        p->cap = cap;
    }
    memcpy(p->fds + p->count, r->fds, r->nfds * sizeof(int));
    p->count += r->nfds;
    p->bytes += q->bytes;
    r->nfds = 0; /* kept */
    if (q->flags & GPCK_HOLD_LAST) {
        s->complete = true;
        s->creator = -1;
        say("holding snapshot %llu of process %d: %llu MiB in %u part(s)", (unsigned long long)s->id, (int)s->pid,
            (unsigned long long)(snapshot_bytes(s) >> 20), s->parts);
    }
    *rep = (struct gpck_hold_rep){ .id = s->id, .bytes = p->bytes, .count = p->count };
    return 0;
}

static int handle_hold_list(struct request *r)
{
    struct gpck_hold_list_rep *rep = r->reply;
    uint32_t n = 0;
    for (size_t i = 0; i < nsnaps; i++)
        for (uint32_t k = 0; k < snaps[i].parts && n < GPCK_MAX_HOLD_ENTRIES; k++) {
            const struct snapshot *s = &snaps[i];
            struct gpck_hold_entry *e = &rep->entries[n++];
            *e = (struct gpck_hold_entry){ .id = s->id, .bytes = s->part[k].bytes, .created_ms = s->created_ms,
                                           .pid = s->pid, .part = k, .fds = s->part[k].count,
                                           .flags = (s->complete ? GPCK_HOLD_COMPLETE : 0) | (s->keep ? GPCK_HOLD_KEPT : 0) };
            memcpy(e->uuid, s->part[k].uuid, 16);
        }
    rep->count = n;
    rep->holder_pid = (uint32_t)getpid();
    r->reply_len = (uint32_t)(sizeof(*rep) + n * sizeof(struct gpck_hold_entry));
    return 0;
}

static int handle_hold_take(struct request *r)
{
    const struct gpck_hold_take_req *q = payload_of(r, sizeof(*q));
    struct gpck_hold_rep *rep = r->reply;
    if (!q)
        return -EPROTO;
    const struct snapshot *s = find(q->id);
    if (!s || !s->complete)
        return -ENOENT;
    if (q->part >= s->parts || q->first >= s->part[q->part].count || !q->count || q->count > GPCK_MAX_STAGING_FILES ||
        q->count > s->part[q->part].count - q->first)
        return -EINVAL;
    r->send = s->part[q->part].fds + q->first; /* sendmsg passes copies; these stay */
    r->nsend = q->count;
    *rep = (struct gpck_hold_rep){ .id = s->id, .count = q->count };
    return 0;
}

static int handle_hold_drop(struct request *r)
{
    const struct gpck_hold_drop_req *q = payload_of(r, sizeof(*q));
    struct gpck_hold_rep *rep = r->reply;
    if (!q)
        return -EPROTO;
    *rep = (struct gpck_hold_rep){ .id = q->id };
    for (size_t i = nsnaps; i-- > 0;) {
        struct snapshot *s = &snaps[i];
        if ((q->id && s->id != q->id) || (q->pid && s->pid != q->pid))
            continue;
        /* A pool's only copy (checkpoint --leave-running, CRIU dumping) goes
         * by its id alone: `gpuckpt release --all` is for snapshots. */
        if (!q->id && s->keep)
            continue;
        rep->bytes += snapshot_bytes(s);
        rep->count++;
        drop(s, "asked to");
    }
    return q->id && !rep->count ? -ENOENT : 0;
}

static bool on_gpu(const struct snapshot *s, const uint8_t *uuid, uint64_t *bytes)
{
    *bytes = 0;
    for (uint32_t i = 0; i < s->parts; i++)
        if (!memcmp(s->part[i].uuid, uuid, 16))
            *bytes += s->part[i].bytes;
    return *bytes > 0;
}

static int handle_hold_reclaim(struct request *r)
{
    const struct gpck_hold_reclaim_req *q = payload_of(r, sizeof(*q));
    struct gpck_hold_rep *rep = r->reply;
    if (!q)
        return -EPROTO;
    *rep = (struct gpck_hold_rep){ 0 };
    /* Asked by a process that allocates: it runs on its pool, so a copy kept
     * for it while it was suspended (its controller died) is stale. */
    struct ucred cred;
    socklen_t len = sizeof(cred);
    uint64_t mine;
    if (getsockopt(r->client, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
        for (size_t i = nsnaps; i-- > 0;)
            if (snaps[i].keep && snaps[i].pid == cred.pid && on_gpu(&snaps[i], q->uuid, &mine)) {
                rep->bytes += mine;
                rep->count++;
                drop(&snaps[i], "its process runs on its pool again");
            }
    while (rep->bytes < q->bytes) {
        struct snapshot *oldest = NULL;
        uint64_t there = 0, b;
        for (size_t i = 0; i < nsnaps; i++)
            if (snaps[i].complete && !snaps[i].keep && on_gpu(&snaps[i], q->uuid, &b) && (!oldest || snaps[i].id < oldest->id)) {
                oldest = &snaps[i];
                there = b;
            }
        if (!oldest)
            break;
        rep->bytes += there;
        rep->count++;
        drop(oldest, "an application on its GPU ran out of memory");
    }
    return 0;
}

int holder_handle(struct request *r)
{
    switch (r->type) {
#define GP_MESSAGE(NAME, name, reply_size, takes_fds)                                                         \
    case GPCK_##NAME:                                                                                           \
        if (r->nfds && !(takes_fds))                                                                            \
            return -EINVAL;                                                                                     \
        r->reply_len = (reply_size);                                                                            \
        return handle_##name(r);
#include "messages.gen.h"
#undef GP_MESSAGE
    default:
        return -EOPNOTSUPP;
    }
}

/* Its checkpoint failed or was killed midway, and nobody else knows its id. */
void holder_drop_unfinished(int client)
{
    for (size_t i = nsnaps; i-- > 0;)
        if (!snaps[i].complete && snaps[i].creator == client)
            drop(&snaps[i], "its checkpoint ended before handing it over whole");
}

void holder_watch_processes(void)
{
    for (size_t i = nsnaps; i-- > 0;)
        if (gp_proc_start_time(snaps[i].pid) != snaps[i].start_time)
            drop(&snaps[i], "its process ended");
}

void holder_drop_all(const char *why)
{
    while (nsnaps)
        drop(&snaps[nsnaps - 1], why);
}

bool holder_holds_any(void)
{
    return nsnaps > 0;
}
