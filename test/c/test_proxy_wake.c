/* Unit tests of waking NCCL's UDS service thread for its join
 * (shim/collective/proxy_wake.c), with a thread that does what NCCL's does:
 * poll() on a datagram socket bound to NCCL's abstract name, then its stop
 * flag. Here the poll has no timeout, so a join the wake misses never
 * returns (alarm ends the test). The test's pthread_join is the shim's. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"
#include "proxy_wake.h"

struct sleeper {
    int nfds; /* pollfds: the socket, then a pipe that never fires */
    int fd, pipe[2];
    struct sockaddr_un addr; /* its first byte '\0', as NCCL binds it */
    socklen_t len;
    atomic_int tid, stop, requests;
    pthread_t thread;
};

static void *sleep_in_poll(void *arg)
{
    struct sleeper *s = arg;
    struct pollfd p[2] = { { .fd = s->fd, .events = POLLIN }, { .fd = s->pipe[0], .events = POLLIN } };
    atomic_store(&s->tid, (int)syscall(SYS_gettid));
    for (;;) {
        while (poll(p, (nfds_t)s->nfds, -1) < 0)
            ;
        if (atomic_load(&s->stop))
            return NULL;
        char b;
        if (recv(s->fd, &b, 1, MSG_DONTWAIT) >= 0) /* taken as a request, as NCCL would */
            atomic_fetch_add(&s->requests, 1);
    }
}

/* Starts s and returns once its thread is blocked in poll. */
static int start(struct sleeper *s, const char *name, int nfds)
{
    memset(s, 0, sizeof(*s));
    s->nfds = nfds;
    s->addr.sun_family = AF_UNIX;
    snprintf(s->addr.sun_path, sizeof(s->addr.sun_path), "%s-%d", name, (int)getpid());
    s->len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(s->addr.sun_path));
    s->addr.sun_path[0] = '\0';
    s->fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    if (s->fd < 0 || bind(s->fd, (struct sockaddr *)&s->addr, s->len) != 0 || pipe(s->pipe) != 0 ||
        pthread_create(&s->thread, NULL, sleep_in_poll, s) != 0)
        return -1;
    char path[64], text[64];
    for (;;) {
        int tid = atomic_load(&s->tid);
        if (tid) {
            snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", tid);
            int fd = open(path, O_RDONLY);
            ssize_t n = fd >= 0 ? read(fd, text, sizeof(text) - 1) : -1;
            if (fd >= 0)
                close(fd);
            long nr = -1;
            if (n > 0 && (text[n] = '\0', sscanf(text, "%ld", &nr) == 1) &&
                (nr == SYS_ppoll
#ifdef SYS_poll
                 || nr == SYS_poll
#endif
                 ))
                return 0;
        }
        usleep(1000);
    }
}

static void close_fds(struct sleeper *s)
{
    close(s->fd);
    close(s->pipe[0]);
    close(s->pipe[1]);
}

/* Ends s: stop, then a datagram of its own. */
static void end(struct sleeper *s)
{
    atomic_store(&s->stop, 1);
    int w = socket(AF_UNIX, SOCK_DGRAM, 0);
    sendto(w, "", 0, 0, (struct sockaddr *)&s->addr, s->len);
    close(w);
    pthread_join(s->thread, NULL);
    close_fds(s);
}

static void test_armed_join_wakes_nccl_thread(void)
{
    struct sleeper s;
    CHECK(start(&s, "/tmp/nccl-socket-0", 1) == 0);
    atomic_store(&s.stop, 1);
    gp_proxy_wake_arm(true);
    CHECK(pthread_join(s.thread, NULL) == 0); /* no return without the wake */
    gp_proxy_wake_arm(false);
    CHECK(atomic_load(&s.requests) == 0);
    close_fds(&s);
}

/* A thread asleep on name with nfds pollfds is not one to wake. */
static void check_left_alone(const char *name, int nfds)
{
    struct sleeper s;
    CHECK(start(&s, name, nfds) == 0);
    CHECK(gp_proxy_wake(s.thread) == 0);
    end(&s);
    CHECK(atomic_load(&s.requests) == 0);
}

static void test_other_socket_left_alone(void)
{
    check_left_alone("/tmp/other-socket-0", 1);
}

static void test_poll_on_more_fds_left_alone(void)
{
    check_left_alone("/tmp/nccl-socket-1", 2);
}

static void test_wake_before_stop_is_a_request(void)
{
    /* What NCCL's thread would see of a wake sent before its stop flag:
     * one malformed request, which it drops; why the shim wakes only at
     * the join. */
    struct sleeper s;
    CHECK(start(&s, "/tmp/nccl-socket-3", 1) == 0);
    CHECK(gp_proxy_wake(s.thread) == 1);
    while (atomic_load(&s.requests) == 0)
        usleep(1000);
    end(&s);
    CHECK(atomic_load(&s.requests) == 1);
}

int main(void)
{
    alarm(20);
    RUN(test_armed_join_wakes_nccl_thread);
    RUN(test_other_socket_left_alone);
    RUN(test_poll_on_more_fds_left_alone);
    RUN(test_wake_before_stop_is_a_request);
    return HARNESS_END();
}
