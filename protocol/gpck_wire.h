/* Messages of the control protocol (gpuckpt_protocol.h) on a Unix
 * SOCK_SEQPACKET socket, with fds passed by SCM_RIGHTS: what the shim's
 * server, the snapshot holder and the C tests send and receive with. */
#ifndef GPCK_WIRE_H
#define GPCK_WIRE_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "gpuckpt_protocol.h"

/* One message; 0 or -errno. */
static inline int gpck_send(int fd, uint16_t type, uint32_t seq, int32_t status, uint32_t flags, const void *payload,
                            uint32_t len, const int *fds, uint32_t nfds)
{
    if (nfds > GPCK_MAX_STAGING_FILES)
        return -EINVAL;
    struct gpck_header h = { GPCK_MAGIC, GPCK_PROTOCOL_VERSION, type, seq, status, len, flags };
    struct iovec iov[2] = { { &h, sizeof(h) }, { (void *)payload, len } };
    union {
        char buf[CMSG_SPACE(sizeof(int) * GPCK_MAX_STAGING_FILES)];
        struct cmsghdr align;
    } ctl;
    struct msghdr msg = { .msg_iov = iov, .msg_iovlen = len ? 2 : 1 };
    if (nfds) {
        memset(&ctl, 0, sizeof(ctl));
        msg.msg_control = ctl.buf;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
    }
    return sendmsg(fd, &msg, MSG_NOSIGNAL) < 0 ? -errno : 0;
}

/* Whether n bytes received into in (msg their recvmsg) are one whole
 * request: the magic, a payload length that matches, not a reply. */
static inline bool gpck_request_well_formed(const struct msghdr *msg, ssize_t n, const void *in)
{
    const struct gpck_header *h = in;
    return !(msg->msg_flags & MSG_TRUNC) && n >= (ssize_t)sizeof(*h) && h->magic == GPCK_MAGIC &&
           h->payload_len == (size_t)n - sizeof(*h) && !(h->type & GPCK_REPLY);
}

/* The fds a received message brought (SCM_RIGHTS) into fds[*count...]: at
 * most GPCK_MAX_STAGING_FILES in all, the rest closed. */
static inline void gpck_received_fds(struct msghdr *msg, int *fds, uint32_t *count)
{
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm; cm = CMSG_NXTHDR(msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
            if (*count < GPCK_MAX_STAGING_FILES)
                fds[(*count)++] = fd;
            else
                close(fd);
        }
    }
}

#endif
