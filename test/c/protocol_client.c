/* Protocol tests against a live shim: a raw client that sends well-formed,
 * malformed, truncated, oversized and unauthorised messages, and checks each
 * is answered as gpuckpt_protocol.h says, with the server still serving.
 *
 *   protocol_client SOCKET all            every scenario below
 *   protocol_client SOCKET as-uid UID     connect as another uid: refused
 *   protocol_client SOCKET fuzz N SEED    N random messages (seeded), then
 *                                         a hello that must still work
 * Linked against the fake driver, with which it makes GPU memory to hand
 * the shim as a migrating controller does.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "gpck_wire.h"
#include "gpuckpt_protocol.h"
#include "harness.h"

/* The wire layout is an ABI between builds of shim and controller. */
_Static_assert(sizeof(struct gpck_header) == 24, "header layout");
_Static_assert(sizeof(struct gpck_hello_rep) == 56, "hello layout");
_Static_assert(sizeof(struct gpck_copy_range) == 32, "copy range layout");
_Static_assert(sizeof(struct gpck_alloc_entry) == 24, "alloc entry layout");
_Static_assert(sizeof(struct gpck_list_rep) == 16, "list reply layout");

static const char *sock_path;

static int connect_shim(void)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    strncpy(a.sun_path, sock_path, sizeof(a.sun_path) - 1);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        if (fd >= 0)
            close(fd);
        return -errno;
    }
    struct timeval tv = { 10, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static int send_raw(int fd, const void *buf, size_t len)
{
    return send(fd, buf, len, MSG_NOSIGNAL) < 0 ? -errno : 0;
}

static int send_msg(int fd, uint16_t type, uint32_t seq, const void *payload, uint32_t len)
{
    uint8_t buf[sizeof(struct gpck_header) + 4096];
    struct gpck_header h = { GPCK_MAGIC, GPCK_PROTOCOL_VERSION, type, seq, 0, len, 0 };
    memcpy(buf, &h, sizeof(h));
    memcpy(buf + sizeof(h), payload, len);
    return send_raw(fd, buf, sizeof(h) + len);
}

/* Receives one reply; returns its status, or 1 when the peer closed, or
 * -1000 - errno on a receive error. */
static int recv_status(int fd, void *payload, size_t cap)
{
    uint8_t buf[GPCK_MAX_MESSAGE];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0)
        return 1;
    if (n < 0)
        return -1000 - errno;
    struct gpck_header h;
    memcpy(&h, buf, sizeof(h));
    if (payload)
        memcpy(payload, buf + sizeof(h), h.payload_len < cap ? h.payload_len : cap);
    return h.status;
}

/* Hello with this build's version; the reply goes to rep where given. */
static int say_hello(int fd, struct gpck_hello_rep *rep)
{
    struct gpck_hello_req req = { GPCK_PROTOCOL_VERSION, 0 };
    send_msg(fd, GPCK_HELLO, 1, &req, sizeof(req));
    return recv_status(fd, rep, rep ? sizeof(*rep) : 0);
}

static int hello(int fd)
{
    return say_hello(fd, NULL);
}

static void test_hello_works(void)
{
    int fd = connect_shim();
    CHECK(fd >= 0);
    struct gpck_hello_req req = { GPCK_PROTOCOL_VERSION, 0 };
    struct gpck_hello_rep rep;
    send_msg(fd, GPCK_HELLO, 1, &req, sizeof(req));
    CHECK(recv_status(fd, &rep, sizeof(rep)) == 0);
    CHECK(rep.version == GPCK_PROTOCOL_VERSION);
    CHECK(rep.pid > 0);
    CHECK(rep.pool_base != 0);
    close(fd);
}

static void test_wrong_client_version_refused(void)
{
    int fd = connect_shim();
    struct gpck_hello_req req = { GPCK_PROTOCOL_VERSION + 41, 0 };
    send_msg(fd, GPCK_HELLO, 1, &req, sizeof(req));
    CHECK(recv_status(fd, NULL, 0) == -EPROTONOSUPPORT);
    close(fd);
}

/* Each malformed message ends its connection with -EPROTO or a close. */
static void expect_dropped(const void *buf, size_t len)
{
    int fd = connect_shim();
    CHECK(fd >= 0);
    send_raw(fd, buf, len);
    int st = recv_status(fd, NULL, 0);
    CHECK(st == -EPROTO || st == 1);
    /* the connection is gone afterwards */
    CHECK(recv_status(fd, NULL, 0) == 1);
    close(fd);
}

static void test_truncated_header(void)
{
    uint8_t buf[10] = { 0x47, 0x50, 0x43, 0x4b };
    expect_dropped(buf, sizeof(buf));
}

static void test_bad_magic(void)
{
    struct gpck_header h = { 0xdeadbeef, GPCK_PROTOCOL_VERSION, GPCK_STATUS, 1, 0, 0, 0 };
    expect_dropped(&h, sizeof(h));
}

static void test_length_mismatch(void)
{
    uint8_t buf[sizeof(struct gpck_header) + 8] = { 0 };
    struct gpck_header h = { GPCK_MAGIC, GPCK_PROTOCOL_VERSION, GPCK_STATUS, 1, 0, 100, 0 };
    memcpy(buf, &h, sizeof(h));
    expect_dropped(buf, sizeof(buf));
}

static void test_oversized(void)
{
    size_t len = GPCK_MAX_MESSAGE + 4096;
    uint8_t *buf = calloc(1, len);
    struct gpck_header h = { GPCK_MAGIC, GPCK_PROTOCOL_VERSION, GPCK_STATUS, 1, 0, (uint32_t)(len - sizeof(h)), 0 };
    memcpy(buf, &h, sizeof(h));
    expect_dropped(buf, len);
    free(buf);
}

static void test_reply_type_from_client(void)
{
    struct gpck_header h = { GPCK_MAGIC, GPCK_PROTOCOL_VERSION, GPCK_STATUS | GPCK_REPLY, 1, 0, 0, 0 };
    expect_dropped(&h, sizeof(h));
}

static void test_unknown_type_and_bad_payloads(void)
{
    int fd = connect_shim();
    CHECK(hello(fd) == 0);
    send_msg(fd, 999, 2, NULL, 0);
    CHECK(recv_status(fd, NULL, 0) == -EOPNOTSUPP);
    uint32_t junk = 7;
    send_msg(fd, GPCK_QUIESCE, 3, &junk, sizeof(junk)); /* wrong payload size */
    CHECK(recv_status(fd, NULL, 0) == -EPROTO);
    struct gpck_list_req lr = { 0, 0, 0 };
    send_msg(fd, GPCK_LIST_ALLOCS, 4, &lr, sizeof(lr)); /* max 0 */
    CHECK(recv_status(fd, NULL, 0) == -EINVAL);
    struct gpck_copy_req cr = { GPCK_MAX_COPY_RANGES + 1, 0 };
    send_msg(fd, GPCK_COPY_OUT, 5, &cr, sizeof(cr)); /* count beyond the limit */
    CHECK(recv_status(fd, NULL, 0) == -EPROTO);
    close(fd);
}

/* Copies need the gate held by this client, staging mapped, and ranges inside
 * live allocations and the staging memory. */
static void test_copy_rules(void)
{
    int fd = connect_shim();
    CHECK(hello(fd) == 0);
    uint8_t buf[sizeof(struct gpck_copy_req) + sizeof(struct gpck_copy_range)];
    struct gpck_copy_req *cr = (void *)buf;
    cr->count = 1;
    cr->ranges[0] = (struct gpck_copy_range){ 0, 0, 0x1000, 4096, 0 };
    send_msg(fd, GPCK_COPY_OUT, 2, buf, sizeof(buf));
    CHECK(recv_status(fd, NULL, 0) == -EPERM); /* not quiesced */

    struct gpck_quiesce_req q = { 5000, 0 };
    send_msg(fd, GPCK_QUIESCE, 3, &q, sizeof(q));
    CHECK(recv_status(fd, NULL, 0) == 0);
    send_msg(fd, GPCK_COPY_OUT, 4, buf, sizeof(buf));
    CHECK(recv_status(fd, NULL, 0) == -ENOBUFS); /* no staging */

    struct gpck_staging_req sr = { .size = 1 << 20 };
    send_msg(fd, GPCK_STAGING_MAP, 5, &sr, sizeof(sr));
    CHECK(recv_status(fd, NULL, 0) == 0); /* (the memfds arrive; unused here) */

    send_msg(fd, GPCK_COPY_OUT, 6, buf, sizeof(buf)); /* 0x1000 is not pool memory */
    CHECK(recv_status(fd, NULL, 0) == -EFAULT);

    struct gpck_list_req lr = { 0, 16, 0 };
    uint8_t lbuf[sizeof(struct gpck_list_rep) + 16 * sizeof(struct gpck_alloc_entry)];
    send_msg(fd, GPCK_LIST_ALLOCS, 7, &lr, sizeof(lr));
    CHECK(recv_status(fd, lbuf, sizeof(lbuf)) == 0);
    struct gpck_list_rep *rep = (void *)lbuf;
    CHECK(rep->count > 0);
    if (rep->count > 0) {
        struct gpck_alloc_entry e = rep->entries[0];
        cr->ranges[0] = (struct gpck_copy_range){ e.device, 0, e.addr, e.size + 4096, 0 };
        send_msg(fd, GPCK_COPY_OUT, 8, buf, sizeof(buf)); /* runs past the allocation */
        CHECK(recv_status(fd, NULL, 0) == -EFAULT);
        cr->ranges[0] = (struct gpck_copy_range){ e.device, 0, e.addr, 4096, (1 << 20) - 1024 };
        send_msg(fd, GPCK_COPY_OUT, 9, buf, sizeof(buf)); /* runs past staging */
        CHECK(recv_status(fd, NULL, 0) == -ERANGE);
        cr->ranges[0] = (struct gpck_copy_range){ e.device, 0, e.addr, 4096, UINT64_MAX - 100 };
        send_msg(fd, GPCK_COPY_OUT, 10, buf, sizeof(buf)); /* offset overflow */
        CHECK(recv_status(fd, NULL, 0) == -ERANGE);
        cr->ranges[0] = (struct gpck_copy_range){ e.device, 0, e.addr, 4096, 0 };
        send_msg(fd, GPCK_COPY_OUT, 11, buf, sizeof(buf));
        CHECK(recv_status(fd, NULL, 0) == 0);
    }

    /* A second client cannot quiesce or resume while this one holds the gate. */
    int other = connect_shim();
    CHECK(hello(other) == 0);
    send_msg(other, GPCK_QUIESCE, 2, &q, sizeof(q));
    CHECK(recv_status(other, NULL, 0) == -EBUSY);
    send_msg(other, GPCK_RESUME, 3, NULL, 0);
    CHECK(recv_status(other, NULL, 0) == -EPERM);
    close(other);

    send_msg(fd, GPCK_RESUME, 12, NULL, 0);
    CHECK(recv_status(fd, NULL, 0) == 0);
    close(fd);
}

/* Digests: the kernel runs only on what the shim has checked: held still,
 * inside one live allocation, aligned, within the limits. */
/* The application's first pool allocation (listed with seq 2). */
static bool first_allocation(int fd, struct gpck_alloc_entry *e)
{
    struct gpck_list_req lr = { 0, 16, 0 };
    uint8_t lbuf[sizeof(struct gpck_list_rep) + 16 * sizeof(struct gpck_alloc_entry)];
    send_msg(fd, GPCK_LIST_ALLOCS, 2, &lr, sizeof(lr));
    CHECK(recv_status(fd, lbuf, sizeof(lbuf)) == 0);
    struct gpck_list_rep *list = (void *)lbuf;
    CHECK(list->count > 0);
    if (list->count == 0)
        return false;
    *e = list->entries[0];
    return true;
}

/* A connection that said hello, and the shim's first allocation in *e;
 * -1 (closed) when there is none. */
static int connect_with_allocation(struct gpck_alloc_entry *e)
{
    int fd = connect_shim();
    CHECK(hello(fd) == 0);
    if (first_allocation(fd, e))
        return fd;
    close(fd);
    return -1;
}

static void test_digest_rules(void)
{
    struct gpck_alloc_entry e;
    int fd = connect_with_allocation(&e);
    if (fd < 0)
        return;
    uint8_t buf[sizeof(struct gpck_digest_req) + sizeof(struct gpck_digest_range)];
    struct gpck_digest_req *dr = (void *)buf;
    *dr = (struct gpck_digest_req){ .device = e.device, .count = 0, .block_size = 0 };
    send_msg(fd, GPCK_BLOCK_DIGEST, 3, dr, sizeof(*dr)); /* load only: allowed unheld */
    CHECK(recv_status(fd, NULL, 0) == 0);
    dr->count = 1;
    dr->block_size = 1 << 21;
    dr->ranges[0] = (struct gpck_digest_range){ e.addr, e.size };
    send_msg(fd, GPCK_BLOCK_DIGEST, 4, buf, sizeof(buf));
    CHECK(recv_status(fd, NULL, 0) == -EPERM); /* not quiesced */

    struct gpck_quiesce_req q = { 5000, 0 };
    send_msg(fd, GPCK_QUIESCE, 5, &q, sizeof(q));
    CHECK(recv_status(fd, NULL, 0) == 0);
    send_msg(fd, GPCK_BLOCK_DIGEST, 6, buf, sizeof(buf) - 1); /* length mismatch */
    CHECK(recv_status(fd, NULL, 0) == -EPROTO);
    dr->ranges[0] = (struct gpck_digest_range){ e.addr, e.size + 4096 };
    send_msg(fd, GPCK_BLOCK_DIGEST, 7, buf, sizeof(buf)); /* runs past the allocation */
    CHECK(recv_status(fd, NULL, 0) == -EFAULT);
    dr->ranges[0] = (struct gpck_digest_range){ 0x1000, 4096 };
    send_msg(fd, GPCK_BLOCK_DIGEST, 8, buf, sizeof(buf)); /* not pool memory */
    CHECK(recv_status(fd, NULL, 0) == -EFAULT);
    dr->ranges[0] = (struct gpck_digest_range){ e.addr + 4, 64 };
    send_msg(fd, GPCK_BLOCK_DIGEST, 9, buf, sizeof(buf)); /* misaligned */
    CHECK(recv_status(fd, NULL, 0) == -EINVAL);
    dr->ranges[0] = (struct gpck_digest_range){ e.addr, e.size };
    dr->block_size = 1000;
    send_msg(fd, GPCK_BLOCK_DIGEST, 10, buf, sizeof(buf)); /* block not a multiple of 4096 */
    CHECK(recv_status(fd, NULL, 0) == -EINVAL);
    dr->block_size = GPCK_MIN_DIGEST_BLOCK;
    dr->ranges[0] = (struct gpck_digest_range){ e.addr, (uint64_t)GPCK_MIN_DIGEST_BLOCK * (GPCK_MAX_DIGESTS + 1) };
    send_msg(fd, GPCK_BLOCK_DIGEST, 11, buf, sizeof(buf)); /* more digests than a reply holds */
    int st = recv_status(fd, NULL, 0);
    CHECK(st == -EINVAL || st == -EFAULT);
    dr->ranges[0] = (struct gpck_digest_range){ e.addr, e.size };
    uint8_t rbuf[sizeof(struct gpck_digest_rep) + 64 * sizeof(uint64_t)];
    send_msg(fd, GPCK_BLOCK_DIGEST, 12, buf, sizeof(buf));
    CHECK(recv_status(fd, rbuf, sizeof(rbuf)) == 0);
    CHECK(((struct gpck_digest_rep *)rbuf)->blocks == (e.size + GPCK_MIN_DIGEST_BLOCK - 1) / GPCK_MIN_DIGEST_BLOCK);

    send_msg(fd, GPCK_RESUME, 13, NULL, 0);
    CHECK(recv_status(fd, NULL, 0) == 0);
    close(fd);
}

/* A live window lets this client copy out and digest without the gate, but
 * only mapped pool memory; nobody may suspend the pool while it is open; it
 * closes with the request or with the connection. */
static void test_live_window_rules(void)
{
    struct gpck_alloc_entry e;
    int fd = connect_with_allocation(&e);
    if (fd < 0)
        return;
    struct gpck_staging_req sr = { .size = 1 << 20 };
    send_msg(fd, GPCK_STAGING_MAP, 3, &sr, sizeof(sr));
    CHECK(recv_status(fd, NULL, 0) == 0); /* (the memfds arrive; unused here) */
    uint8_t cbuf[sizeof(struct gpck_copy_req) + sizeof(struct gpck_copy_range)];
    struct gpck_copy_req *cr = (void *)cbuf;
    *cr = (struct gpck_copy_req){ .count = 1, .flags = 0 };
    cr->ranges[0] = (struct gpck_copy_range){ e.device, 0, e.addr, e.size < 4096 ? e.size : 4096, 0 };
    send_msg(fd, GPCK_COPY_OUT, 4, cbuf, sizeof(cbuf));
    CHECK(recv_status(fd, NULL, 0) == -EPERM); /* no window, no gate */

    struct gpck_live_req bad = { 2, 0 };
    send_msg(fd, GPCK_LIVE_WINDOW, 5, &bad, sizeof(bad));
    CHECK(recv_status(fd, NULL, 0) == -EPROTO);
    struct gpck_live_req open_req = { 1, 0 };
    send_msg(fd, GPCK_LIVE_WINDOW, 6, &open_req, sizeof(open_req));
    CHECK(recv_status(fd, NULL, 0) == 0);
    send_msg(fd, GPCK_COPY_OUT, 7, cbuf, sizeof(cbuf));
    CHECK(recv_status(fd, NULL, 0) == 0); /* unheld, in the window */
    send_msg(fd, GPCK_COPY_IN, 8, cbuf, sizeof(cbuf));
    CHECK(recv_status(fd, NULL, 0) == -EPERM); /* never writes */
    cr->ranges[0].addr = 0x1000;
    send_msg(fd, GPCK_COPY_OUT, 9, cbuf, sizeof(cbuf));
    CHECK(recv_status(fd, NULL, 0) == -EFAULT); /* not pool memory */
    uint8_t dbuf[sizeof(struct gpck_digest_req) + sizeof(struct gpck_digest_range)];
    struct gpck_digest_req *dr = (void *)dbuf;
    *dr = (struct gpck_digest_req){ .device = e.device, .count = 1, .block_size = GPCK_MIN_DIGEST_BLOCK };
    dr->ranges[0] = (struct gpck_digest_range){ e.addr, e.size };
    uint8_t rbuf[sizeof(struct gpck_digest_rep) + 64 * sizeof(uint64_t)];
    send_msg(fd, GPCK_BLOCK_DIGEST, 10, dbuf, sizeof(dbuf));
    CHECK(recv_status(fd, rbuf, sizeof(rbuf)) == 0); /* unheld, in the window */

    /* A second controller cannot suspend the pool under the window. */
    int other = connect_shim();
    CHECK(hello(other) == 0);
    struct gpck_quiesce_req q = { 5000, 0 };
    send_msg(other, GPCK_QUIESCE, 2, &q, sizeof(q));
    CHECK(recv_status(other, NULL, 0) == 0);
    struct gpck_suspend_req sus = { 0, 0, "/tmp/nowhere" };
    send_msg(other, GPCK_SUSPEND_POOL, 3, &sus, sizeof(sus));
    CHECK(recv_status(other, NULL, 0) == -EBUSY);
    send_msg(other, GPCK_RESUME, 4, NULL, 0);
    CHECK(recv_status(other, NULL, 0) == 0);
    close(other);

    struct gpck_live_req close_req = { 0, 0 };
    send_msg(fd, GPCK_LIVE_WINDOW, 11, &close_req, sizeof(close_req));
    CHECK(recv_status(fd, NULL, 0) == 0);
    cr->ranges[0].addr = e.addr;
    send_msg(fd, GPCK_COPY_OUT, 12, cbuf, sizeof(cbuf));
    CHECK(recv_status(fd, NULL, 0) == -EPERM); /* closed again */
    send_msg(fd, GPCK_LIVE_WINDOW, 13, &open_req, sizeof(open_req));
    CHECK(recv_status(fd, NULL, 0) == 0);
    close(fd); /* the window closes with the connection */
}

/* Staging memory the host cannot give is refused, not attempted: pinning it
 * inside the application would get the application killed. */
static void test_oversized_staging_refused(void)
{
    int fd = connect_shim();
    CHECK(hello(fd) == 0);
    struct gpck_staging_req sr = { .size = 1ull << 50 };
    send_msg(fd, GPCK_STAGING_MAP, 2, &sr, sizeof(sr));
    CHECK(recv_status(fd, NULL, 0) == -ENOMEM);
    sr.size = 0;
    send_msg(fd, GPCK_STAGING_MAP, 3, &sr, sizeof(sr));
    CHECK(recv_status(fd, NULL, 0) == -EINVAL);
    sr = (struct gpck_staging_req){ .flags = GPCK_STAGING_HELD };
    send_msg(fd, GPCK_STAGING_MAP, 4, &sr, sizeof(sr)); /* nothing is held */
    CHECK(recv_status(fd, NULL, 0) == -ENOENT);
    sr = (struct gpck_staging_req){ .size = 1 << 20, .flags = 0x80 };
    send_msg(fd, GPCK_STAGING_MAP, 5, &sr, sizeof(sr)); /* unknown flag */
    CHECK(recv_status(fd, NULL, 0) == -EINVAL);
    close(fd);
}

/* Suspend needs the gate held by the sender and a terminated path; remap
 * needs a suspended pool. */
static void test_suspend_rules(void)
{
    int fd = connect_shim();
    CHECK(hello(fd) == 0);
    struct gpck_suspend_req sr;
    memset(&sr, 'x', sizeof(sr));
    send_msg(fd, GPCK_SUSPEND_POOL, 2, &sr, sizeof(sr)); /* no NUL */
    CHECK(recv_status(fd, NULL, 0) == -ENAMETOOLONG);
    strcpy(sr.image, "/tmp/nowhere");
    send_msg(fd, GPCK_SUSPEND_POOL, 3, &sr, sizeof(sr)); /* unknown flags ('xxxx') */
    CHECK(recv_status(fd, NULL, 0) == -EINVAL);
    sr.flags = 0;
    sr.reserved = 0;
    send_msg(fd, GPCK_SUSPEND_POOL, 3, &sr, sizeof(sr)); /* gate not held */
    CHECK(recv_status(fd, NULL, 0) == -EPERM);
    send_msg(fd, GPCK_REMAP_POOL, 4, NULL, 0); /* not suspended */
    CHECK(recv_status(fd, NULL, 0) == -EINVAL);
    send_msg(fd, GPCK_DROP_HELD, 5, &sr, sizeof(sr)); /* not suspended */
    CHECK(recv_status(fd, NULL, 0) == -EINVAL);
    close(fd);
}

static struct gpck_status_rep status_of(int fd)
{
    struct gpck_status_rep st;
    memset(&st, 0, sizeof(st));
    send_msg(fd, GPCK_STATUS, 90, NULL, 0);
    CHECK(recv_status(fd, &st, sizeof(st)) == 0);
    return st;
}

/* One range copied (type GPCK_COPY_OUT or GPCK_COPY_IN); the reply's status. */
static int copy_one(int fd, uint16_t type, const struct gpck_copy_range *range, uint32_t flags)
{
    uint8_t buf[sizeof(struct gpck_copy_req) + sizeof(struct gpck_copy_range)];
    struct gpck_copy_req *cr = (void *)buf;
    *cr = (struct gpck_copy_req){ 1, flags };
    cr->ranges[0] = *range;
    send_msg(fd, type, 6, buf, sizeof(buf));
    return recv_status(fd, NULL, 0);
}

/* Quiesces (flags), maps staging, and copies the first 4 KiB of the first
 * allocation out to staging offset 0: copying it back in changes nothing. */
static int rollback_client(uint32_t quiesce_flags, int expect_quiesce, struct gpck_copy_range *range)
{
    int fd = connect_shim();
    CHECK(hello(fd) == 0);
    struct gpck_quiesce_req q = { 60000, quiesce_flags };
    send_msg(fd, GPCK_QUIESCE, 2, &q, sizeof(q));
    int st = recv_status(fd, NULL, 0);
    CHECK(st == expect_quiesce);
    if (st)
        return fd;
    struct gpck_staging_req sr = { .size = 1 << 20 };
    send_msg(fd, GPCK_STAGING_MAP, 3, &sr, sizeof(sr));
    CHECK(recv_status(fd, NULL, 0) == 0);
    struct gpck_list_req lr = { 0, 1, 0 };
    uint8_t lbuf[sizeof(struct gpck_list_rep) + sizeof(struct gpck_alloc_entry)];
    send_msg(fd, GPCK_LIST_ALLOCS, 4, &lr, sizeof(lr));
    CHECK(recv_status(fd, lbuf, sizeof(lbuf)) == 0);
    struct gpck_list_rep *rep = (void *)lbuf;
    CHECK(rep->count == 1);
    *range = (struct gpck_copy_range){ rep->entries[0].device, 0, rep->entries[0].addr, 4096, 0 };
    CHECK(copy_one(fd, GPCK_COPY_OUT, range, 0) == 0);
    return fd;
}

static int copy_back(int fd, const struct gpck_copy_range *range, uint32_t flags)
{
    return copy_one(fd, GPCK_COPY_IN, range, flags);
}

/* Writing into a running pool is a declared rollback's alone; one cut off
 * before its last copy leaves the application held (half restored) until
 * another rollback completes; cut off after it, the application runs on. */
static void test_rollback_rules(void)
{
    struct gpck_copy_range range;
    int fd = rollback_client(0, 0, &range);
    CHECK(copy_back(fd, &range, 0) == -EPERM); /* a plain pause may only read */
    close(fd);
    usleep(100000);

    fd = rollback_client(GPCK_QUIESCE_ROLLBACK, 0, &range);
    CHECK(copy_back(fd, &range, 0) == 0);
    send_msg(fd, GPCK_RESUME, 7, NULL, 0); /* not onto a half-written pool */
    CHECK(recv_status(fd, NULL, 0) == -EPERM);
    close(fd); /* the controller is lost midway */
    usleep(100000);

    int watcher = connect_shim();
    CHECK(hello(watcher) == 0);
    struct gpck_status_rep st = status_of(watcher);
    CHECK(st.pool_state == GPCK_POOL_HALF_RESTORED);
    CHECK(st.gate_state == GPCK_GATE_CLOSED);
    close(rollback_client(0, -ENOTRECOVERABLE, &range)); /* no checkpoint of a half-restored pool */
    struct gpck_quiesce_req bad = { 60000, 0x80 };
    send_msg(watcher, GPCK_QUIESCE, 8, &bad, sizeof(bad));
    CHECK(recv_status(watcher, NULL, 0) == -EINVAL);

    fd = rollback_client(GPCK_QUIESCE_ROLLBACK, 0, &range); /* another rollback takes it */
    send_msg(fd, GPCK_RESUME, 7, NULL, 0); /* nothing copied yet: still half restored */
    CHECK(recv_status(fd, NULL, 0) == -EPERM);
    CHECK(copy_back(fd, &range, GPCK_COPY_COMPLETES) == 0);
    send_msg(fd, GPCK_RESUME, 8, NULL, 0);
    CHECK(recv_status(fd, NULL, 0) == 0);
    close(fd);
    st = status_of(watcher);
    CHECK(st.pool_state == GPCK_POOL_ACTIVE && st.gate_state == GPCK_GATE_OPEN);

    fd = rollback_client(GPCK_QUIESCE_ROLLBACK, 0, &range);
    CHECK(copy_back(fd, &range, GPCK_COPY_COMPLETES) == 0);
    close(fd); /* lost after the last copy: the rollback stands, the application runs */
    usleep(100000);
    st = status_of(watcher);
    CHECK(st.pool_state == GPCK_POOL_ACTIVE && st.gate_state == GPCK_GATE_OPEN);
    close(watcher);
}

/* The digest of range's bytes as one block (0: all zeros), or UINT64_MAX - 1
 * (even, so never a digest: those are 0 or odd) when refused. */
static uint64_t digest_of(int fd, const struct gpck_copy_range *range)
{
    uint8_t buf[sizeof(struct gpck_digest_req) + sizeof(struct gpck_digest_range)];
    struct gpck_digest_req *dr = (void *)buf;
    *dr = (struct gpck_digest_req){ .device = range->device, .count = 1, .block_size = range->length };
    dr->ranges[0] = (struct gpck_digest_range){ range->addr, range->length };
    uint8_t rbuf[sizeof(struct gpck_digest_rep) + sizeof(uint64_t)];
    send_msg(fd, GPCK_BLOCK_DIGEST, 9, buf, sizeof(buf));
    if (recv_status(fd, rbuf, sizeof(rbuf)) != 0)
        return UINT64_MAX - 1;
    return ((struct gpck_digest_rep *)rbuf)->digests[0];
}

/* GPCK_COPY_ZEROS sets a copy in's ranges to zero on the GPU: a rollback's
 * or a resume's alone, inside live allocations, reading no staging. */
static void test_zero_fill(void)
{
    struct gpck_copy_range range;
    int fd = rollback_client(0, 0, &range);
    CHECK(copy_back(fd, &range, GPCK_COPY_ZEROS) == -EPERM); /* a plain pause may only read */
    close(fd);
    usleep(100000);

    fd = rollback_client(GPCK_QUIESCE_ROLLBACK, 0, &range);
    uint64_t before = digest_of(fd, &range);
    CHECK(before != 0 && before != UINT64_MAX - 1); /* the application's data is not all zeros */
    CHECK(copy_one(fd, GPCK_COPY_OUT, &range, GPCK_COPY_ZEROS) == -EINVAL); /* never a copy out */
    struct gpck_copy_range bad = range;
    bad.staging_offset = 4096;
    CHECK(copy_back(fd, &bad, GPCK_COPY_ZEROS) == -EINVAL); /* reads no staging */
    bad = (struct gpck_copy_range){ range.device, 0, 0x1000, 4096, 0 };
    CHECK(copy_back(fd, &bad, GPCK_COPY_ZEROS) == -EFAULT); /* not pool memory */
    CHECK(copy_back(fd, &range, GPCK_COPY_ZEROS) == 0);
    CHECK(digest_of(fd, &range) == 0);
    CHECK(copy_back(fd, &range, GPCK_COPY_COMPLETES) == 0); /* the saved bytes back */
    CHECK(digest_of(fd, &range) == before);
    send_msg(fd, GPCK_RESUME, 8, NULL, 0);
    CHECK(recv_status(fd, NULL, 0) == 0);
    close(fd);
}

static int send_with_fds(int fd, uint16_t type, uint32_t seq, const void *payload, uint32_t len, const int *fds,
                         uint32_t n)
{
    return gpck_send(fd, type, seq, 0, 0, payload, len, fds, n);
}

/* A memfd of size bytes, sealed against shrinking when seal is set, and
 * filled with bytes (i * 7 + salt) % 251 of its global offset i. */
static int staging_file(uint64_t size, uint64_t at, int salt, bool seal)
{
    int fd = memfd_create("test-staging", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)size) == 0);
    uint8_t *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    for (uint64_t i = 0; i < size; i++)
        p[i] = (uint8_t)(((at + i) * 7 + salt) % 251);
    munmap(p, size);
    if (seal)
        CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
    return fd;
}

/* Fds of pid whose target begins with prefix: this test's staging memfds
 * (the shim keeps none once it has mapped them), or the fake driver's
 * device memory (its handles' memfds). */
static int fds_named(int pid, const char *prefix)
{
    char link[80], target[256];
    int n = 0;
    for (int fd = 0; fd < 4096; fd++) {
        snprintf(link, sizeof(link), "/proc/%d/fd/%d", pid, fd);
        ssize_t len = readlink(link, target, sizeof(target) - 1);
        if (len > 0) {
            target[len] = 0;
            n += strncmp(target, prefix, strlen(prefix)) == 0;
        }
    }
    return n;
}

#define memfds_of(pid) fds_named(pid, "/memfd:test-staging")
#define device_memfds_of(pid) fds_named(pid, "/memfd:fake-cuda-dev")

/* Gives f (three files of 1 MiB, 1 MiB, 512 KiB) as staging with req, and
 * checks that the third file's data goes into the pool and back out into
 * the first; the application's first 4 KiB are saved at offset 0 and put
 * back, so it keeps its data. The shim keeps no fd of the files. */
static void given_round_trip(int fd, const struct gpck_staging_req *req, const int *f, int shim_pid)
{
    const uint64_t file = 1 << 20;
    CHECK(send_with_fds(fd, GPCK_STAGING_MAP, 20, req, sizeof(*req), f, 3) == 0);
    struct gpck_staging_rep rep;
    CHECK(recv_status(fd, &rep, sizeof(rep)) == 0);
    CHECK(rep.size == req->size && rep.files == 0);
    CHECK(memfds_of(shim_pid) == 0);

    struct gpck_alloc_entry e;
    struct gpck_quiesce_req q = { 60000, GPCK_QUIESCE_ROLLBACK };
    send_msg(fd, GPCK_QUIESCE, 8, &q, sizeof(q));
    CHECK(recv_status(fd, NULL, 0) == 0);
    if (first_allocation(fd, &e)) {
        struct gpck_copy_range saved = { e.device, 0, e.addr, 4096, 0 };
        CHECK(copy_one(fd, GPCK_COPY_OUT, &saved, 0) == 0);
        struct gpck_copy_range r = { e.device, 0, e.addr, 4096, 2 * file + 4096 };
        CHECK(copy_back(fd, &r, 0) == 0);
        struct gpck_copy_range back_out = { e.device, 0, e.addr, 4096, 4096 };
        CHECK(copy_one(fd, GPCK_COPY_OUT, &back_out, 0) == 0);
        uint8_t *first = mmap(NULL, 8192, PROT_READ, MAP_SHARED, f[0], 0);
        CHECK(first != MAP_FAILED);
        bool same = true;
        for (uint64_t i = 0; i < 4096; i++)
            same &= first[4096 + i] == (uint8_t)(((2 * file + 4096 + i) * 7 + 3) % 251);
        CHECK(same);
        munmap(first, 8192);
        CHECK(copy_back(fd, &saved, GPCK_COPY_COMPLETES) == 0);
    }
    send_msg(fd, GPCK_RESUME, 11, NULL, 0);
    CHECK(recv_status(fd, NULL, 0) == 0);
}

/* Staging the controller makes (GPCK_STAGING_GIVEN) is taken only as the
 * declared number of files, each sealed against shrinking and as large as
 * its part; fds on any other request are refused; the connection serves on
 * after each refusal; data the controller put in the files goes into the
 * pool, and the shim keeps no fd of them. */
static void test_given_staging(void)
{
    int fd = connect_shim();
    struct gpck_hello_rep hello_rep;
    CHECK(say_hello(fd, &hello_rep) == 0);
    const uint64_t file = 1 << 20, size = (2 << 20) + (512 << 10); /* three files, the last one half */
    int f[3];
    for (int i = 0; i < 3; i++)
        f[i] = staging_file(i < 2 ? file : size - 2 * file, (uint64_t)i * file, 3, true);
    struct gpck_staging_req sr = { .size = size, .flags = GPCK_STAGING_GIVEN, .files = 3, .file_bytes = file };

    CHECK(send_with_fds(fd, GPCK_STAGING_MAP, 2, &sr, sizeof(sr), f, 2) == 0); /* one file short */
    CHECK(recv_status(fd, NULL, 0) == -EINVAL);
    int loose = staging_file(file, file, 3, false);
    int with_loose[3] = { f[0], loose, f[2] };
    CHECK(send_with_fds(fd, GPCK_STAGING_MAP, 3, &sr, sizeof(sr), with_loose, 3) == 0); /* could shrink */
    CHECK(recv_status(fd, NULL, 0) == -EINVAL);
    /* A tmpfs file cannot be sealed: taken unlinked (staging on huge pages), refused while a path reaches it. */
    char shm_path[64];
    snprintf(shm_path, sizeof(shm_path), "/dev/shm/gpuckpt-test-staging-%d", (int)getpid());
    int on_tmpfs = open(shm_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    CHECK(on_tmpfs >= 0 && ftruncate(on_tmpfs, (off_t)file) == 0);
    int with_tmpfs[3] = { f[0], on_tmpfs, f[2] };
    CHECK(send_with_fds(fd, GPCK_STAGING_MAP, 12, &sr, sizeof(sr), with_tmpfs, 3) == 0); /* linked: could be cut */
    CHECK(recv_status(fd, NULL, 0) == -EINVAL);
    CHECK(unlink(shm_path) == 0);
    CHECK(send_with_fds(fd, GPCK_STAGING_MAP, 13, &sr, sizeof(sr), with_tmpfs, 3) == 0);
    struct gpck_staging_rep taken;
    CHECK(recv_status(fd, &taken, sizeof(taken)) == 0 && taken.size == sr.size);
    close(on_tmpfs);
    int short_last[3] = { f[0], f[1], f[2] };
    struct gpck_staging_req longer = sr;
    longer.size = 3 * file; /* the last file is half of its part */
    CHECK(send_with_fds(fd, GPCK_STAGING_MAP, 4, &longer, sizeof(longer), short_last, 3) == 0);
    CHECK(recv_status(fd, NULL, 0) == -EINVAL);
    CHECK(send_with_fds(fd, GPCK_STATUS, 5, NULL, 0, f, 1) == 0); /* only staging brings fds */
    CHECK(recv_status(fd, NULL, 0) == -EINVAL);
    struct gpck_staging_req plain = { .size = 1 << 20 };
    CHECK(send_with_fds(fd, GPCK_STAGING_MAP, 6, &plain, sizeof(plain), f, 1) == 0); /* fds, but not given */
    CHECK(recv_status(fd, NULL, 0) == -EINVAL);
    struct gpck_staging_req unpinned_only = { .size = 1 << 20, .flags = GPCK_STAGING_UNPINNED };
    send_msg(fd, GPCK_STAGING_MAP, 7, &unpinned_only, sizeof(unpinned_only)); /* only for given staging */
    CHECK(recv_status(fd, NULL, 0) == -EINVAL);
    given_round_trip(fd, &sr, f, (int)hello_rep.pid); /* pinned while filled */
    sr.flags |= GPCK_STAGING_UNPINNED;
    given_round_trip(fd, &sr, f, (int)hello_rep.pid); /* filled: through the bounce ring */
    for (int i = 0; i < 3; i++)
        close(f[i]);
    close(loose);
    close(fd);
}

/* n chunks of device 0's memory, exported as fds, as the controller's
 * createPeerChunks makes them (this process releases its handles). */
static void exported_chunks(uint64_t chunk, int *fds, int n)
{
    CHECK(cuInit(0) == CUDA_SUCCESS);
    CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
                                 .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR };
    for (int i = 0; i < n; i++) {
        CUmemGenericAllocationHandle h;
        CHECK(cuMemCreate(&h, chunk, &prop, 0) == CUDA_SUCCESS);
        CHECK(cuMemExportToShareableHandle(&fds[i], h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == CUDA_SUCCESS);
        CHECK(cuMemRelease(h) == CUDA_SUCCESS);
    }
}

static int peer_request(int fd, uint32_t flags, uint64_t first, const int *fds, uint32_t n, struct gpck_peer_rep *rep)
{
    struct gpck_peer_req req = { .device = 0, .flags = flags, .first = first };
    CHECK(send_with_fds(fd, GPCK_PEER_HOLD, 30, &req, sizeof(req), fds, n) == 0);
    return recv_status(fd, rep, rep ? sizeof(*rep) : 0);
}

static int peer_hold(int fd, uint64_t first, const int *fds, uint32_t n, struct gpck_peer_rep *rep)
{
    return peer_request(fd, 0, first, fds, n, rep);
}

/* A client after its hello; n: device 0's chunks in use (1 to 7), with
 * n + extra exported chunks in f; before: the shim's device memfds then. */
struct peer_client {
    int fd, pid, n, before;
    struct gpck_hello_rep hello;
};

static struct peer_client peer_client(int extra, int *f)
{
    struct peer_client p = { .fd = connect_shim() };
    CHECK(say_hello(p.fd, &p.hello) == 0);
    p.pid = (int)p.hello.pid;
    p.n = (int)status_of(p.fd).devices[0].chunks_in_use;
    CHECK(p.n >= 1 && p.n + extra <= 8);
    exported_chunks(p.hello.chunk_size, f, p.n + extra);
    p.before = device_memfds_of(p.pid);
    return p;
}

/* A migrate's peer hold (GPCK_PEER_HOLD) is refused without the gate, out
 * of order, or beyond the chunks in use; a suspend holding peer memory is
 * refused until every chunk is held; a controller that leaves drops what
 * was held. Held whole, the pool is released, and the remap maps the held
 * memory where the chunks were (on their own device: nothing is copied);
 * the application gets its data back (bad-input.test.ts checks it), and
 * the shim keeps no fd of the held memory afterwards. */
static void test_peer_hold(void)
{
    int f[8];
    struct peer_client p = peer_client(1, f);
    int fd = p.fd, pid = p.pid, n = p.n, before = p.before;
    struct gpck_hello_rep hello_rep = p.hello;
    struct gpck_quiesce_req q = { 60000, 0 };
    struct gpck_suspend_req sr = { .flags = GPCK_SUSPEND_HOLD_PEER };
    strcpy(sr.image, "/tmp/held-on-a-gpu");

    CHECK(peer_hold(fd, 0, f, (uint32_t)n, NULL) == -EPERM); /* gate not held */
    send_msg(fd, GPCK_QUIESCE, 2, &q, sizeof(q));
    CHECK(recv_status(fd, NULL, 0) == 0);
    CHECK(peer_hold(fd, 1, f, 1, NULL) == -EINVAL);                 /* out of order */
    CHECK(peer_hold(fd, 0, f, (uint32_t)n + 1, NULL) == -EINVAL);   /* more than the chunks in use */
    send_msg(fd, GPCK_SUSPEND_POOL, 3, &sr, sizeof(sr));            /* nothing held */
    CHECK(recv_status(fd, NULL, 0) == -EINVAL);
    struct gpck_peer_rep pr;
    if (n > 1) {
        CHECK(peer_hold(fd, 0, f, (uint32_t)n - 1, &pr) == 0 && pr.chunks_held == (uint64_t)n - 1);
        send_msg(fd, GPCK_SUSPEND_POOL, 4, &sr, sizeof(sr)); /* not all held */
        CHECK(recv_status(fd, NULL, 0) == -EINVAL);
    }
    CHECK(peer_hold(fd, 0, f, (uint32_t)n, &pr) == 0); /* first 0 starts over */
    CHECK(pr.chunks_held == (uint64_t)n && pr.bytes == (uint64_t)n * hello_rep.chunk_size);
    CHECK(device_memfds_of(pid) == before + n);
    close(fd); /* the controller leaves: the gate reopens, the hold goes */
    usleep(100000);
    fd = connect_shim();
    CHECK(hello(fd) == 0);
    struct gpck_status_rep st = status_of(fd);
    CHECK(st.pool_state == GPCK_POOL_ACTIVE && st.gate_state == GPCK_GATE_OPEN);
    CHECK(device_memfds_of(pid) == before);

    send_msg(fd, GPCK_QUIESCE, 5, &q, sizeof(q));
    CHECK(recv_status(fd, NULL, 0) == 0);
    CHECK(peer_hold(fd, 0, f, (uint32_t)n, &pr) == 0);
    send_msg(fd, GPCK_SUSPEND_POOL, 6, &sr, sizeof(sr));
    struct gpck_pool_rep pool;
    CHECK(recv_status(fd, &pool, sizeof(pool)) == 0);
    st = status_of(fd);
    CHECK(st.pool_state == GPCK_POOL_SUSPENDED && st.devices[0].bytes_mapped == 0);
    CHECK(strcmp(st.held_image, sr.image) == 0);
    send_msg(fd, GPCK_REMAP_POOL, 7, NULL, 0);
    CHECK(recv_status(fd, &pool, sizeof(pool)) == 0);
    CHECK(pool.bytes_copied == 0 && pool.bytes >= (uint64_t)n * hello_rep.chunk_size);
    send_msg(fd, GPCK_RESUME, 8, NULL, 0);
    CHECK(recv_status(fd, NULL, 0) == 0);
    /* The pool's chunks are the imports now; the held fds go on a thread of the shim's. */
    for (int i = 0; i < 200 && device_memfds_of(pid) != before; i++)
        usleep(10000);
    CHECK(device_memfds_of(pid) == before);
    for (int i = 0; i <= n; i++)
        close(f[i]);
    close(fd);
}

static int snapshot_request(int fd, uint32_t flags, const struct gpck_chunk_run *runs, uint32_t count, const int *fds,
                            uint32_t n, struct gpck_peer_rep *rep)
{
    uint8_t buf[sizeof(struct gpck_peer_req) + 8 * sizeof(struct gpck_chunk_run)];
    struct gpck_peer_req *req = (void *)buf;
    *req = (struct gpck_peer_req){ .device = 0, .flags = GPCK_PEER_SNAPSHOT | flags, .count = count };
    memcpy(req->runs, runs, count * sizeof(*runs));
    CHECK(send_with_fds(fd, GPCK_PEER_HOLD, 40, buf, (uint32_t)(sizeof(*req) + count * sizeof(*runs)), fds, n) == 0);
    return recv_status(fd, rep, rep ? sizeof(*rep) : 0);
}

/* A GPU-held snapshot's copies (GPCK_PEER_SNAPSHOT): out only by the gate's
 * holder, back in only in a rollback; one run per fd; a run beyond the
 * chunks in use refused before anything is copied (-ESTALE); the shim keeps
 * no fd either way, and the data comes back. */
static void test_peer_snapshot(void)
{
    int f[8];
    struct peer_client p = peer_client(0, f);
    int fd = p.fd, pid = p.pid, before = p.before;
    uint64_t cs = p.hello.chunk_size;
    struct gpck_list_req lr = { 0, 1, 0 };
    uint8_t lbuf[sizeof(struct gpck_list_rep) + sizeof(struct gpck_alloc_entry)];
    send_msg(fd, GPCK_LIST_ALLOCS, 2, &lr, sizeof(lr));
    CHECK(recv_status(fd, lbuf, sizeof(lbuf)) == 0);
    struct gpck_alloc_entry e = ((struct gpck_list_rep *)lbuf)->entries[0];
    struct gpck_chunk_run run = { e.addr - (e.addr - p.hello.pool_base) % cs, 1 };
    struct gpck_chunk_run beyond = { p.hello.pool_base + p.hello.slice_size - cs, 1 };
    struct gpck_quiesce_req q = { 60000, 0 }, rq = { 60000, GPCK_QUIESCE_ROLLBACK };
    struct gpck_peer_rep pr;

    CHECK(snapshot_request(fd, 0, &run, 1, f, 1, NULL) == -EPERM); /* the gate not held */
    send_msg(fd, GPCK_QUIESCE, 3, &q, sizeof(q));
    CHECK(recv_status(fd, NULL, 0) == 0);
    CHECK(snapshot_request(fd, 0, &run, 1, f, 2, NULL) == -EINVAL);         /* one run per fd */
    CHECK(snapshot_request(fd, 0, &beyond, 1, f, 1, NULL) == -ESTALE);      /* not a chunk in use */
    CHECK(snapshot_request(fd, GPCK_PEER_INTO_POOL, &run, 1, f, 1, NULL) == -EPERM); /* not a rollback */
    CHECK(snapshot_request(fd, 0, &run, 1, f, 1, &pr) == 0 && pr.bytes == cs);
    CHECK(device_memfds_of(pid) == before); /* nothing kept */
    send_msg(fd, GPCK_RESUME, 4, NULL, 0);
    CHECK(recv_status(fd, NULL, 0) == 0);
    send_msg(fd, GPCK_QUIESCE, 5, &rq, sizeof(rq));
    CHECK(recv_status(fd, NULL, 0) == 0);
    CHECK(snapshot_request(fd, GPCK_PEER_INTO_POOL | GPCK_PEER_COMPLETES, &run, 1, f, 1, &pr) == 0 && pr.bytes == cs);
    send_msg(fd, GPCK_RESUME, 6, NULL, 0);
    CHECK(recv_status(fd, NULL, 0) == 0);
    CHECK(status_of(fd).pool_state == GPCK_POOL_ACTIVE);
    CHECK(device_memfds_of(pid) == before);
    for (int i = 0; i < p.n; i++)
        close(f[i]);
    close(fd);
}

/* checkpoint --leave-running's copy on the GPU: the hold is dropped while
 * suspended (the sender keeps its fds), copied back in after the remap
 * (only by the gate's holder, during a resume), mapped as a mirror while
 * the pool runs, and taken back uncopied (adopt) only while suspended; the
 * flags combine one way at most, COMPLETES with INTO_POOL only. */
static void test_peer_copy_rules(void)
{
    int f[8];
    struct peer_client p = peer_client(0, f);
    int fd = p.fd, pid = p.pid, n = p.n, before = p.before;
    struct gpck_hello_rep hello_rep = p.hello;
    struct gpck_quiesce_req q = { 60000, 0 };
    struct gpck_suspend_req sr = { .flags = GPCK_SUSPEND_HOLD_PEER };
    strcpy(sr.image, "/tmp/held-on-the-same-gpu");
    struct gpck_suspend_req drop = { 0 };
    strcpy(drop.image, "/tmp/kept-by-the-controller");
    struct gpck_peer_rep pr;
    struct gpck_pool_rep pool;

    CHECK(peer_request(fd, GPCK_PEER_INTO_POOL | GPCK_PEER_MIRROR, 0, f, (uint32_t)n, NULL) == -EINVAL);
    CHECK(peer_request(fd, GPCK_PEER_MIRROR | GPCK_PEER_COMPLETES, 0, f, (uint32_t)n, NULL) == -EINVAL);
    CHECK(peer_request(fd, 32, 0, f, (uint32_t)n, NULL) == -EINVAL);
    CHECK(peer_request(fd, GPCK_PEER_SNAPSHOT | GPCK_PEER_MIRROR, 0, f, (uint32_t)n, NULL) == -EINVAL); /* SNAPSHOT alone or with INTO_POOL */
    CHECK(peer_request(fd, GPCK_PEER_ADOPT, 0, f, (uint32_t)n, NULL) == -EBUSY); /* not suspended */
    send_msg(fd, GPCK_QUIESCE, 2, &q, sizeof(q));
    CHECK(recv_status(fd, NULL, 0) == 0);
    CHECK(peer_request(fd, GPCK_PEER_INTO_POOL, 0, f, (uint32_t)n, NULL) == -EPERM); /* no resume under way */
    CHECK(peer_hold(fd, 0, f, (uint32_t)n, &pr) == 0 && pr.chunks_held == (uint64_t)n);
    send_msg(fd, GPCK_SUSPEND_POOL, 3, &sr, sizeof(sr));
    CHECK(recv_status(fd, &pool, sizeof(pool)) == 0);
    int suspended = device_memfds_of(pid);
    CHECK(peer_request(fd, GPCK_PEER_MIRROR, 0, f, (uint32_t)n, NULL) == -EPERM); /* suspended */
    send_msg(fd, GPCK_DROP_HELD, 4, &drop, sizeof(drop));                         /* the shim lets its fds go */
    CHECK(recv_status(fd, NULL, 0) == 0);
    CHECK(device_memfds_of(pid) == suspended - n);
    struct gpck_status_rep st = status_of(fd);
    CHECK(st.pool_state == GPCK_POOL_SUSPENDED && strcmp(st.held_image, drop.image) == 0);
    send_msg(fd, GPCK_REMAP_POOL, 5, NULL, 0); /* fresh memory: nothing held */
    CHECK(recv_status(fd, &pool, sizeof(pool)) == 0 && pool.bytes_copied == 0);
    CHECK(peer_request(fd, GPCK_PEER_INTO_POOL, 1, f, (uint32_t)n, NULL) == -EINVAL); /* beyond the hold's chunks */
    CHECK(peer_request(fd, GPCK_PEER_INTO_POOL | GPCK_PEER_COMPLETES, 0, f, (uint32_t)n, &pr) == 0);
    CHECK(pr.bytes == (uint64_t)n * hello_rep.chunk_size);
    send_msg(fd, GPCK_RESUME, 6, NULL, 0);
    CHECK(recv_status(fd, NULL, 0) == 0);
    CHECK(device_memfds_of(pid) == before); /* copied back, no fd kept */

    /* Mirrored while the pool runs, and gone with the client that made it. */
    CHECK(peer_request(fd, GPCK_PEER_MIRROR, 1, f, 1, NULL) == -EINVAL); /* out of order */
    CHECK(peer_request(fd, GPCK_PEER_MIRROR, 0, f, (uint32_t)n, &pr) == 0);
    CHECK(device_memfds_of(pid) == before + n);
    /* Copies out of it need no gate, and only what it maps. */
    struct gpck_staging_req staging = { .size = 1 << 20 };
    send_msg(fd, GPCK_STAGING_MAP, 7, &staging, sizeof(staging));
    CHECK(recv_status(fd, NULL, 0) == 0);
    struct gpck_alloc_entry e;
    CHECK(first_allocation(fd, &e));
    uint8_t buf[sizeof(struct gpck_copy_req) + sizeof(struct gpck_copy_range)];
    struct gpck_copy_req *cr = (void *)buf;
    *cr = (struct gpck_copy_req){ .count = 1, .flags = GPCK_COPY_FROM_MIRROR };
    uint64_t beyond = e.addr + (uint64_t)n * hello_rep.chunk_size; /* past the last chunk the hold had */
    const struct { uint16_t type; uint64_t addr; int want; } copies[] = {
        { GPCK_COPY_OUT, e.addr, 0 },
        { GPCK_COPY_OUT, 0x1000, -EFAULT },
        { GPCK_COPY_OUT, beyond, -EFAULT },
        { GPCK_COPY_IN, e.addr, -EINVAL }, /* a mirror is read only */
    };
    for (size_t i = 0; i < sizeof(copies) / sizeof(copies[0]); i++) {
        cr->ranges[0] = (struct gpck_copy_range){ 0, 0, copies[i].addr, 4096, 0 };
        send_msg(fd, copies[i].type, 8 + (uint32_t)i, buf, sizeof(buf));
        CHECK(recv_status(fd, NULL, 0) == copies[i].want);
    }
    int other = connect_shim();
    CHECK(hello(other) == 0);
    CHECK(peer_request(other, GPCK_PEER_MIRROR, 0, f, (uint32_t)n, NULL) == -EBUSY); /* another's mirror */
    close(other);
    close(fd);
    for (int i = 0; i < 200 && device_memfds_of(pid) != before; i++)
        usleep(10000);
    CHECK(device_memfds_of(pid) == before);
    for (int i = 0; i < n; i++)
        close(f[i]);
}

/* A client that disconnects while holding the gate releases it at once. */
static void test_disconnect_reopens_gate(void)
{
    int fd = connect_shim();
    CHECK(hello(fd) == 0);
    struct gpck_quiesce_req q = { 60000, 0 };
    send_msg(fd, GPCK_QUIESCE, 2, &q, sizeof(q));
    CHECK(recv_status(fd, NULL, 0) == 0);
    close(fd);
    usleep(100000);
    int again = connect_shim();
    CHECK(hello(again) == 0);
    struct gpck_status_rep st;
    send_msg(again, GPCK_STATUS, 2, NULL, 0);
    CHECK(recv_status(again, &st, sizeof(st)) == 0);
    CHECK(st.gate_state == GPCK_GATE_OPEN);
    close(again);
}

static int as_uid(int uid)
{
    if (setgid((gid_t)uid) < 0 || setuid((uid_t)uid) < 0) {
        printf("cannot become uid %d: %s\n", uid, strerror(errno));
        return 2;
    }
    int fd = connect_shim();
    if (fd < 0) {
        printf("refused at connect: %s\n", strerror(-fd));
        return 0;
    }
    /* Wait for the shim's verdict before speaking, as a polite client would;
     * the refusal arrives unasked. */
    usleep(200000);
    int st = hello(fd);
    if (st == -EACCES) {
        printf("refused by the shim: %s\n", strerror(EACCES));
        return 0;
    }
    printf("NOT refused: status %d\n", st);
    return 1;
}

/* Random messages: raw junk, headers of random types with random payloads,
 * oversized ones. Left out on purpose: SUSPEND_POOL (a peer of the same uid
 * may legitimately hold the application suspended) and staging sizes that
 * would pin much host memory in the application. The connection is opened
 * again whenever the shim drops it. */
static unsigned long long fuzz_state;
static unsigned fuzz_next(void)
{
    fuzz_state ^= fuzz_state << 13;
    fuzz_state ^= fuzz_state >> 7;
    fuzz_state ^= fuzz_state << 17;
    return (unsigned)(fuzz_state >> 11);
}

static int fuzz(int n, unsigned long long seed)
{
    fuzz_state = seed | 1;
    static uint8_t buf[GPCK_MAX_MESSAGE + 8192];
    int fd = connect_shim(), drops = 0, answered = 0;
    for (int i = 0; i < n; i++) {
        if (fd < 0) {
            fd = connect_shim();
            if (fd < 0)
                return printf("cannot reconnect after %d messages\n", i), 1;
        }
        size_t len;
        unsigned kind = fuzz_next() % 10;
        if (kind < 3) { /* raw junk */
            len = fuzz_next() % 300;
            for (size_t k = 0; k < len; k++)
                buf[k] = (uint8_t)fuzz_next();
        } else if (kind < 9) { /* a header of a random type, random payload */
            uint16_t type = (uint16_t)(fuzz_next() % 16);
            if (type == GPCK_SUSPEND_POOL)
                type = GPCK_STATUS;
            uint32_t plen = fuzz_next() % 3 ? fuzz_next() % 80 : fuzz_next() % 4096;
            struct gpck_header h = { GPCK_MAGIC, GPCK_PROTOCOL_VERSION, type, (uint32_t)i, 0, plen, 0 };
            if (fuzz_next() % 8 == 0)
                h.payload_len = fuzz_next(); /* a lying length */
            memcpy(buf, &h, sizeof(h));
            for (uint32_t k = 0; k < plen; k++)
                buf[sizeof(h) + k] = (uint8_t)fuzz_next();
            if (type == GPCK_STAGING_MAP && plen >= 8) {
                uint64_t small = fuzz_next() % (64u << 20);
                memcpy(buf + sizeof(h), &small, sizeof(small));
            }
            len = sizeof(h) + plen;
        } else { /* oversized */
            len = GPCK_MAX_MESSAGE + 1 + fuzz_next() % 4096;
            memset(buf, 0x41, len);
        }
        if (send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
            close(fd);
            fd = -1;
            drops++;
            continue;
        }
        int st = recv_status(fd, NULL, 0);
        if (st == 1 || st <= -1000) { /* dropped by the shim */
            close(fd);
            fd = -1;
            drops++;
        } else {
            answered++;
        }
    }
    if (fd >= 0)
        close(fd);
    int check = connect_shim();
    int ok = check >= 0 && hello(check) == 0;
    if (check >= 0)
        close(check);
    printf("fuzz: %d messages, %d answered, %d connections dropped; server %s\n", n, answered, drops,
           ok ? "still serving" : "NOT serving");
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: protocol_client SOCKET all | as-uid UID\n");
        return 2;
    }
    sock_path = argv[1];
    if (!strcmp(argv[2], "as-uid") && argc == 4)
        return as_uid(atoi(argv[3]));
    if (!strcmp(argv[2], "fuzz") && argc == 5)
        return fuzz(atoi(argv[3]), strtoull(argv[4], NULL, 0));
    RUN(test_hello_works);
    RUN(test_wrong_client_version_refused);
    RUN(test_truncated_header);
    RUN(test_bad_magic);
    RUN(test_length_mismatch);
    RUN(test_oversized);
    RUN(test_reply_type_from_client);
    RUN(test_unknown_type_and_bad_payloads);
    RUN(test_copy_rules);
    RUN(test_digest_rules);
    RUN(test_live_window_rules);
    RUN(test_oversized_staging_refused);
    RUN(test_suspend_rules);
    RUN(test_disconnect_reopens_gate);
    RUN(test_rollback_rules);
    RUN(test_zero_fill);
    RUN(test_given_staging);
    RUN(test_peer_hold);
    RUN(test_peer_copy_rules);
    RUN(test_peer_snapshot);
    RUN(test_hello_works); /* still serving after all of it */
    return HARNESS_END();
}
