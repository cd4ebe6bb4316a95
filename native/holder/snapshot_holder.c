/* gpuckpt-snapshot-holder SOCKET: keeps GPU-held snapshots alive.
 *
 * A GPU-held snapshot (checkpoint --gpu-only --to-gpu) is memory on a GPU,
 * a copy of a pool's chunks, exported as POSIX fds. Whoever holds the fds
 * holds the memory (test/gpu/probes/peer_fd_lifetime.c): this process does,
 * so that snapshots outlive the controller that made them, without a CUDA
 * context of its own (no GPU memory, no driver state to checkpoint).
 *
 * It serves the HOLD_* messages of the control protocol (GPCK_HOLD_* in
 * protocol/gpuckpt_protocol.h) on SOCKET, to its own user only. A snapshot
 * goes when asked, when its process ends, or when an application on its
 * GPU runs out of memory (HOLD_RECLAIM from that application's shim,
 * oldest first). It prints "ready" (or "running" when another holder
 * answers on SOCKET already) on stdout, then lets go of it, and ends once
 * it holds nothing and nobody is connected. Logs go to stderr. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "gpck_wire.h"
#include "gpuckpt_protocol.h"
#include "../common/proc_stat.h"

#define MAX_CLIENTS 32
#define WATCH_MS 500        /* how often ended processes are looked for */
#define IDLE_EXIT_MS 3000   /* holding nothing and unconnected this long: exit */

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
    uint32_t parts;
    struct part part[GPCK_MAX_DEVICES];
};

static struct snapshot *snaps;
static size_t nsnaps, capsnaps;
static uint64_t next_id = 1;
static int clients[MAX_CLIENTS];
static volatile sig_atomic_t stopping;

static uint64_t now_ms(clockid_t clock)
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

struct request {
    uint16_t type;
    const void *payload;
    uint32_t len;
    int *fds;           /* brought with it; a handler that keeps them sets nfds 0 */
    uint32_t nfds;
    void *reply;
    uint32_t reply_len;
    const int *send;    /* fds the reply passes */
    uint32_t nsend;
};

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
        *s = (struct snapshot){ .id = next_id++, .start_time = q->start_time, .created_ms = now_ms(CLOCK_REALTIME),
                                .pid = q->pid };
    } else if (!(s = find(q->id)) || s->complete || s->pid != q->pid) {
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
                                           .pid = s->pid, .part = k, .fds = s->part[k].count, .complete = s->complete };
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
    while (rep->bytes < q->bytes) {
        struct snapshot *oldest = NULL;
        uint64_t there = 0, b;
        for (size_t i = 0; i < nsnaps; i++)
            if (snaps[i].complete && on_gpu(&snaps[i], q->uuid, &b) && (!oldest || snaps[i].id < oldest->id)) {
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

static int handle(struct request *r)
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

/* ------------------------------------------------------------ transport -- */

static int send_reply(int fd, uint16_t type, uint32_t seq, int32_t status, const void *payload, uint32_t len,
                      const int *fds, uint32_t nfds)
{
    return gpck_send(fd, type | GPCK_REPLY, seq, status, 0, payload, len, fds, nfds);
}

/* One request, one reply; a malformed one ends the connection. */
static bool serve_one(int fd)
{
    static uint8_t in[GPCK_MAX_MESSAGE], out[GPCK_MAX_MESSAGE];
    struct iovec iov = { in, sizeof(in) };
    union {
        char buf[CMSG_SPACE(sizeof(int) * GPCK_MAX_STAGING_FILES)];
        struct cmsghdr align;
    } ctl;
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
    ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n <= 0)
        return false;
    int fds[GPCK_MAX_STAGING_FILES];
    struct request r = { .fds = fds, .reply = out };
    gpck_received_fds(&msg, fds, &r.nfds);
    const struct gpck_header *h = (const void *)in;
    bool ok = !(msg.msg_flags & MSG_TRUNC) && (size_t)n >= sizeof(*h) && h->magic == GPCK_MAGIC &&
              h->payload_len == (size_t)n - sizeof(*h) && !(h->type & GPCK_REPLY);
    int status = !ok                                      ? -EPROTO
                 : h->version != GPCK_PROTOCOL_VERSION    ? -EPROTONOSUPPORT
                 : (msg.msg_flags & MSG_CTRUNC)           ? -EMFILE
                                                          : 0;
    if (!status) {
        r.type = h->type;
        r.payload = in + sizeof(*h);
        r.len = h->payload_len;
        status = handle(&r);
    }
    for (uint32_t i = 0; i < r.nfds; i++)
        close(fds[i]);
    int sent = send_reply(fd, ok ? h->type : 0, ok ? h->seq : 0, status, status ? NULL : out,
                          status ? 0 : r.reply_len, status ? NULL : r.send, status ? 0 : r.nsend);
    return ok && status != -EPROTONOSUPPORT && sent == 0;
}

static int listen_on(const char *path)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof(addr.sun_path))
        return -ENAMETOOLONG;
    strcpy(addr.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    mode_t old = umask(077);
    int rc = bind(fd, (struct sockaddr *)&addr, sizeof(addr));
    if (rc < 0 && errno == EADDRINUSE) {
        /* Another holder answering there keeps the snapshots; a dead one's socket is stale. */
        int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        bool answered = probe >= 0 && connect(probe, (struct sockaddr *)&addr, sizeof(addr)) == 0;
        if (probe >= 0)
            close(probe);
        if (answered) {
            umask(old);
            close(fd);
            return -EEXIST;
        }
        unlink(path);
        rc = bind(fd, (struct sockaddr *)&addr, sizeof(addr));
    }
    umask(old);
    if (rc < 0 || chmod(path, 0600) < 0 || listen(fd, MAX_CLIENTS) < 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    return fd;
}

static void accept_client(int listen_fd)
{
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.uid != geteuid()) {
        send_reply(fd, 0, 0, -EACCES, NULL, 0, NULL, 0);
        close(fd);
        return;
    }
    for (int i = 0; i < MAX_CLIENTS; i++)
        if (clients[i] < 0) {
            clients[i] = fd;
            return;
        }
    send_reply(fd, 0, 0, -EUSERS, NULL, 0, NULL, 0);
    close(fd);
}

/* Snapshots of processes that ended (or whose PID now names another) go. */
static void watch_processes(void)
{
    for (size_t i = nsnaps; i-- > 0;)
        if (gp_proc_start_time(snaps[i].pid) != snaps[i].start_time)
            drop(&snaps[i], "its process ended");
}

static void on_signal(int sig)
{
    (void)sig;
    stopping = 1;
}

/* Room for the fds of many snapshots: one per chunk held. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gpuckpt-snapshot-holder SOCKET\n");
        return 2;
    }
    int listen_fd = listen_on(argv[1]);
    if (listen_fd == -EEXIST) {
        printf("running\n");
        return 0;
    }
    if (listen_fd < 0) {
        printf("failed: cannot listen on %s: %s\n", argv[1], strerror(-listen_fd));
        return 1;
    }
    raise_fd_limit();
    struct sigaction sa = { .sa_handler = on_signal };
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    for (int i = 0; i < MAX_CLIENTS; i++)
        clients[i] = -1;
    printf("ready\n");
    fflush(stdout);
    int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (devnull >= 0) {
        dup2(devnull, STDOUT_FILENO); /* the starter's pipe is let go */
        close(devnull);
    }
    uint64_t idle_since = now_ms(CLOCK_MONOTONIC);
    while (!stopping) {
        struct pollfd p[MAX_CLIENTS + 1] = { { .fd = listen_fd, .events = POLLIN } };
        int map[MAX_CLIENTS + 1], n = 1;
        for (int i = 0; i < MAX_CLIENTS; i++)
            if (clients[i] >= 0) {
                p[n] = (struct pollfd){ .fd = clients[i], .events = POLLIN };
                map[n++] = i;
            }
        int rc = poll(p, (nfds_t)n, WATCH_MS);
        if (rc < 0 && errno != EINTR)
            break;
        for (int k = 1; k < n && rc > 0; k++)
            if (p[k].revents && !serve_one(clients[map[k]])) {
                close(clients[map[k]]);
                clients[map[k]] = -1;
            }
        if (rc > 0 && p[0].revents)
            accept_client(listen_fd);
        watch_processes();
        bool connected = false;
        for (int i = 0; i < MAX_CLIENTS; i++)
            connected |= clients[i] >= 0;
        uint64_t now = now_ms(CLOCK_MONOTONIC);
        if (nsnaps || connected)
            idle_since = now;
        else if (now - idle_since >= IDLE_EXIT_MS)
            break;
    }
    /* The socket goes first: a new holder may start while the memory is let go. */
    unlink(argv[1]);
    close(listen_fd);
    while (nsnaps)
        drop(&snaps[nsnaps - 1], stopping ? "the holder was stopped" : "the holder ends");
    return 0;
}
