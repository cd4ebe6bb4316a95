/* Control server: socket set-up, peer checks, framing, and the poll loop.
 * One thread serves every client in turn; requests are short (a copy batch
 * is bounded), and a client holding the gate is watched by its lease. */
#define _GNU_SOURCE
#include "server.h"
#include "snapshot_reclaim.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "../interpose/driver_error.h"
#include "../interpose/gate.h"
#include "../interpose/log.h"
#include "../interpose/shim.h"
#include "../interpose/test_hooks.h"
#include "gpck_wire.h"
#include "gpuckpt_protocol.h"
#include "handlers.h"

#define MAX_CLIENTS 8

static char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static pid_t owner_pid;
static int listen_fd = -1;
static struct gp_client clients[MAX_CLIENTS];

/* The directory must be ours and closed to others: a socket inside a
 * directory someone else controls could be swapped under us. */
static int prepare_run_dir(const char *dir)
{
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return -errno;
    struct stat st;
    if (lstat(dir, &st) < 0)
        return -errno;
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
        GP_ERROR("control", "%s must be a directory owned by uid %u with mode 0700", dir, (unsigned)geteuid());
        return -EPERM;
    }
    return 0;
}

static int open_listener(const struct gp_config *cfg)
{
    int err = prepare_run_dir(cfg->run_dir);
    if (err)
        return err;
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    int n = snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/%d.sock", cfg->run_dir, (int)getpid());
    if (n < 0 || (size_t)n >= sizeof(addr.sun_path))
        return -ENAMETOOLONG;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    unlink(addr.sun_path); /* a stale socket of an earlier process with our pid */
    mode_t old = umask(077);
    int rc = bind(fd, (struct sockaddr *)&addr, sizeof(addr));
    umask(old);
    if (rc < 0 || chmod(addr.sun_path, 0600) < 0 || listen(fd, MAX_CLIENTS) < 0) {
        err = -errno;
        close(fd);
        return err;
    }
    memcpy(socket_path, addr.sun_path, sizeof(socket_path));
    owner_pid = getpid();
    return fd;
}

static const struct gp_fds NO_FDS;

static int send_message(int fd, uint16_t type, uint32_t seq, int32_t status, const void *payload, uint32_t len,
                        struct gp_fds pass, uint32_t flags)
{
    return gpck_send(fd, type, seq, status, flags, payload, len, pass.fds, pass.count);
}

/* Closes a refused peer without a reset: a socket closed with unread data
 * makes the peer's next read fail with ECONNRESET before it can read why it
 * was refused, so drain what it already sent first. */
static void close_refused(int fd)
{
    uint8_t junk[512];
    shutdown(fd, SHUT_WR);
    while (recv(fd, junk, sizeof(junk), MSG_DONTWAIT) > 0)
        ;
    close(fd);
}

/* Only the application's own user may steer it. A refused peer is told why
 * in a hello reply, so its tool can say so in one line. */
static int accept_client(void)
{
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.uid != geteuid()) {
        GP_WARN("control", "refused a peer of uid %d", len == sizeof(cred) ? (int)cred.uid : -1);
        send_message(fd, GPCK_HELLO | GPCK_REPLY, 0, -EACCES, NULL, 0, NO_FDS, 0);
        close_refused(fd);
        return -EACCES;
    }
    for (int i = 0; i < MAX_CLIENTS; i++) {
        if (clients[i].fd < 0) {
            clients[i] = (struct gp_client){ .fd = fd, .last_message_ns = gp_now_ns(), .staging = { .nfds = 0 } };
            return 0;
        }
    }
    send_message(fd, GPCK_HELLO | GPCK_REPLY, 0, -EUSERS, NULL, 0, NO_FDS, 0);
    close_refused(fd);
    return -EUSERS;
}

static void drop_client(struct gp_client *c)
{
    gp_client_release(c);
    close(c->fd);
    c->fd = -1;
}

/* The fds a message brought, into given (at most GPCK_MAX_STAGING_FILES). */
static void take_fds(struct msghdr *msg, struct gp_fds_in *given)
{
    gpck_received_fds(msg, given->fds, &given->count);
}

static void close_fds(struct gp_fds_in *given)
{
    for (uint32_t i = 0; i < given->count; i++)
        close(given->fds[i]);
    given->count = 0;
}

/* One request, one reply. A malformed message (bad magic, version,
 * truncated, oversized, wrong length) ends the connection: a peer that
 * speaks garbage gets no second chance to confuse the server. Fds a
 * request brings are closed unless its handler takes them, so none leaks
 * into the application. */
static void serve_one(struct gp_client *c, uint8_t *in, uint8_t *out)
{
    struct iovec iov = { in, GPCK_MAX_MESSAGE };
    union {
        char buf[CMSG_SPACE(sizeof(int) * GPCK_MAX_STAGING_FILES)];
        struct cmsghdr align;
    } ctl;
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
    int fds[GPCK_MAX_STAGING_FILES];
    struct gp_fds_in given = { fds, 0 };
    ssize_t n = recvmsg(c->fd, &msg, MSG_CMSG_CLOEXEC);
    if (n <= 0) {
        drop_client(c);
        return;
    }
    take_fds(&msg, &given);
    c->last_message_ns = gp_now_ns();
    const struct gpck_header *h = (const void *)in;
    if (!gpck_request_well_formed(&msg, n, in)) {
        /* Said a few times, not once per message: a peer sending garbage
         * must not flood the application's stderr either. */
        static unsigned malformed;
        if (++malformed <= 3)
            GP_WARN("control", "malformed message (%zd bytes): closing the connection%s", n,
                    malformed == 3 ? " (further ones silently)" : "");
        send_message(c->fd, GPCK_REPLY, 0, -EPROTO, NULL, 0, NO_FDS, 0);
        close_fds(&given);
        drop_client(c);
        return;
    }
    if (h->version != GPCK_PROTOCOL_VERSION && h->type != GPCK_HELLO) {
        send_message(c->fd, h->type | GPCK_REPLY, h->seq, -EPROTONOSUPPORT, NULL, 0, NO_FDS, 0);
        close_fds(&given);
        drop_client(c);
        return;
    }
    if (msg.msg_flags & MSG_CTRUNC) {
        /* The kernel dropped fds this process had no room for (or more than
         * any request carries): the request cannot be served, the
         * connection can. */
        GP_WARN("control", "a request's fds did not fit (%u arrived): refused it; the controller falls back", given.count);
        close_fds(&given);
        send_message(c->fd, h->type | GPCK_REPLY, h->seq, -EMFILE, NULL, 0, NO_FDS, 0);
        return;
    }
    struct gp_request req = { .client = c, .type = h->type, .payload = in + sizeof(*h), .len = h->payload_len, .given = &given, .reply = out };
    gp_driver_error_clear();
    int status = gp_handle_request(&req);
    close_fds(&given);
    uint32_t reply_len = req.reply_len;
    struct gp_fds pass = req.send;
    /* A failure's reply payload is never read: the failed driver call's name replaces it. */
    uint32_t flags = 0;
    size_t text = status < 0 ? gp_driver_error_text((char *)out, GPCK_ERROR_TEXT_LEN) : 0;
    if (text) {
        reply_len = (uint32_t)text + 1;
        flags = GPCK_REPLY_ERROR_TEXT;
    }
    int sent = send_message(c->fd, h->type | GPCK_REPLY, h->seq, status, out, reply_len, pass, flags);
    if (pass.close_after)
        for (uint32_t i = 0; i < pass.count; i++)
            close(pass.fds[i]);
    else if (pass.count)
        gp_client_fds_sent(c);
    if (sent < 0)
        drop_client(c);
}

static int poll_timeout_ms(void)
{
    int timeout = -1;
    uint64_t now = gp_now_ns();
    for (int i = 0; i < MAX_CLIENTS; i++) {
        const struct gp_client *c = &clients[i];
        if (c->fd < 0 || !c->holds_gate)
            continue;
        uint64_t deadline = c->last_message_ns + (uint64_t)c->lease_ms * 1000000ull;
        int ms = deadline > now ? (int)((deadline - now) / 1000000ull) + 1 : 0;
        if (timeout < 0 || ms < timeout)
            timeout = ms;
    }
    return timeout;
}

static void expire_leases(void)
{
    uint64_t now = gp_now_ns();
    for (int i = 0; i < MAX_CLIENTS; i++) {
        struct gp_client *c = &clients[i];
        if (c->fd >= 0 && c->holds_gate && now - c->last_message_ns >= (uint64_t)c->lease_ms * 1000000ull)
            gp_client_drop_gate(c, "controller silent past its lease");
    }
}

static void *server_main(void *arg)
{
    (void)arg;
    /* Signals belong to the application's threads. */
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    if (gp_test_faults_count_this_thread)
        gp_test_faults_count_this_thread();
    static uint8_t in[GPCK_MAX_MESSAGE], out[GPCK_MAX_MESSAGE];
    struct pollfd fds[MAX_CLIENTS + 1];
    for (;;) {
        int n = 0, map[MAX_CLIENTS + 1];
        fds[n] = (struct pollfd){ .fd = listen_fd, .events = POLLIN };
        map[n++] = -1;
        for (int i = 0; i < MAX_CLIENTS; i++) {
            if (clients[i].fd < 0)
                continue;
            fds[n] = (struct pollfd){ .fd = clients[i].fd, .events = POLLIN };
            map[n++] = i;
        }
        int rc = poll(fds, (nfds_t)n, poll_timeout_ms());
        if (rc < 0 && errno != EINTR) {
            GP_ERROR("control", "poll: %s", strerror(errno));
            return NULL;
        }
        expire_leases();
        for (int k = 0; k < n && rc > 0; k++) {
            if (!fds[k].revents)
                continue;
            if (map[k] < 0)
                accept_client();
            else if (clients[map[k]].fd >= 0)
                serve_one(&clients[map[k]], in, out);
        }
    }
    return NULL;
}

int gp_control_server_start(const struct gp_config *cfg)
{
    for (int i = 0; i < MAX_CLIENTS; i++)
        clients[i].fd = -1;
    int fd = open_listener(cfg);
    if (fd < 0)
        return fd;
    listen_fd = fd;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    int err = pthread_create(&t, &attr, server_main, NULL);
    pthread_attr_destroy(&attr);
    if (err) {
        close(fd);
        unlink(socket_path);
        socket_path[0] = 0;
        listen_fd = -1;
        return -err;
    }
    pthread_setname_np(t, "gpuckpt-ctl");
    GP_INFO("control", "listening on %s", socket_path);
    return 0;
}

void gp_control_server_stop(void)
{
    if (socket_path[0] && owner_pid == getpid())
        unlink(socket_path);
    socket_path[0] = 0;
}

void gp_control_server_forget(void)
{
    socket_path[0] = 0;
    if (listen_fd < 0)
        return; /* never started: clients[] holds no descriptors */
    close(listen_fd);
    listen_fd = -1;
    for (int i = 0; i < MAX_CLIENTS; i++)
        if (clients[i].fd >= 0) {
            close(clients[i].fd);
            clients[i].fd = -1;
        }
}

static const struct gp_control_hooks hooks = {
    .start = gp_control_server_start,
    .stop = gp_control_server_stop,
    .forget = gp_control_server_forget,
    .reclaim = gp_snapshot_reclaim,
};

__attribute__((constructor)) static void gp_control_register(void)
{
    gp_shim_register_control(&hooks);
}
