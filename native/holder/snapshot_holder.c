/* gpuckpt-snapshot-holder SOCKET: keeps GPU-held snapshots alive.
 *
 * A GPU-held snapshot (checkpoint --gpu-only --to-gpu) is memory on a GPU,
 * a copy of a pool's chunks, exported as POSIX fds. Whoever holds the fds
 * holds the memory (test/gpu/probes/peer_fd_lifetime.c): this process does,
 * so that snapshots outlive the controller that made them, without a CUDA
 * context of its own (no GPU memory, no driver state to checkpoint). It
 * keeps host memory the same way: while a whole-process checkpoint's CRIU
 * dumps, a suspended pool's staging memfds (filed under the all-zero UUID).
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
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "gpck_wire.h"
#include "gpuckpt_protocol.h"
#include "snapshots.h"

#define MAX_CLIENTS 32
#define WATCH_MS 500        /* how often ended processes are looked for */
#define IDLE_EXIT_MS 3000   /* holding nothing and unconnected this long: exit */

static int clients[MAX_CLIENTS];
static volatile sig_atomic_t stopping;

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
    struct request r = { .client = fd, .fds = fds, .reply = out };
    gpck_received_fds(&msg, fds, &r.nfds);
    const struct gpck_header *h = (const void *)in;
    bool ok = gpck_request_well_formed(&msg, n, in);
    int status = !ok                                      ? -EPROTO
                 : h->version != GPCK_PROTOCOL_VERSION    ? -EPROTONOSUPPORT
                 : (msg.msg_flags & MSG_CTRUNC)           ? -EMFILE
                                                          : 0;
    if (!status) {
        r.type = h->type;
        r.payload = in + sizeof(*h);
        r.len = h->payload_len;
        status = holder_handle(&r);
    }
    for (uint32_t i = 0; i < r.nfds; i++)
        close(fds[i]);
    int sent = send_reply(fd, ok ? h->type : 0, ok ? h->seq : 0, status, status ? NULL : out,
                          status ? 0 : r.reply_len, status ? NULL : r.send, status ? 0 : r.nsend);
    return ok && status != -EPROTONOSUPPORT && sent == 0;
}

static bool answers(const struct sockaddr_un *addr)
{
    int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    bool yes = probe >= 0 && connect(probe, (const struct sockaddr *)addr, sizeof(*addr)) == 0;
    if (probe >= 0)
        close(probe);
    return yes;
}

/* One holder per socket: the one that holds SOCKET.lock (flock, for its
 * whole life) owns the path, and a socket file without it is stale. A
 * holder on its way out still has it: wait for it a little. -EEXIST: a
 * live holder answers; fd of the lock otherwise. */
static int take_lock(const char *path, const struct sockaddr_un *addr)
{
    char lock[PATH_MAX];
    if (snprintf(lock, sizeof(lock), "%s.lock", path) >= (int)sizeof(lock))
        return -ENAMETOOLONG;
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    for (int i = 0; i < 60; i++) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            return fd;
        if (errno != EWOULDBLOCK || answers(addr))
            break;
        usleep(50000);
    }
    int err = errno == EWOULDBLOCK ? (answers(addr) ? -EEXIST : -EBUSY) : -errno;
    close(fd);
    return err;
}

/* Under the lock: the socket, replacing a stale one. */
static int listen_on(const char *path, const struct sockaddr_un *addr)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    unlink(path);
    mode_t old = umask(077);
    int rc = bind(fd, (const struct sockaddr *)addr, sizeof(*addr));
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
    /* A client that stops reading must not stall the others (and every shim's reclaim). */
    struct timeval tv = { .tv_sec = 1 };
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
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
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    if (strlen(argv[1]) >= sizeof(addr.sun_path)) {
        printf("failed: the socket path %s is too long\n", argv[1]);
        return 1;
    }
    strcpy(addr.sun_path, argv[1]);
    int lock = take_lock(argv[1], &addr);
    if (lock == -EEXIST) {
        printf("running\n");
        return 0;
    }
    int listen_fd = lock < 0 ? lock : listen_on(argv[1], &addr);
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
    uint64_t idle_since = holder_now_ms(CLOCK_MONOTONIC);
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
                holder_drop_unfinished(clients[map[k]]);
                close(clients[map[k]]);
                clients[map[k]] = -1;
            }
        if (rc > 0 && p[0].revents)
            accept_client(listen_fd);
        holder_watch_processes();
        bool connected = false;
        for (int i = 0; i < MAX_CLIENTS; i++)
            connected |= clients[i] >= 0;
        uint64_t now = holder_now_ms(CLOCK_MONOTONIC);
        if (holder_holds_any() || connected)
            idle_since = now;
        else if (now - idle_since >= IDLE_EXIT_MS)
            break;
    }
    /* The socket and the lock go first: a new holder may start while the memory is let go. */
    unlink(argv[1]);
    close(listen_fd);
    close(lock);
    holder_drop_all(stopping ? "the holder was stopped" : "the holder ends");
    return 0;
}
