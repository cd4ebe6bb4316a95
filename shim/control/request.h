/* A client of the control server and one request it sent: what every
 * handler (handlers.c, collective_handlers.c) works on. */
#ifndef GPUCKPT_CONTROL_REQUEST_H
#define GPUCKPT_CONTROL_REQUEST_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpuckpt_protocol.h"
#include "staging.h"

struct gp_client {
    int fd;
    bool holds_gate;          /* this client quiesced the application */
    bool rollback;            /* ... to write an image back (GPCK_QUIESCE_ROLLBACK) */
    bool live;                /* its live window is open (GPCK_LIVE_WINDOW) */
    bool holds_cut;           /* it holds the NCCL cut (GPCK_NCCL_HOLD) */
    uint32_t lease_ms;        /* reopen the gate after this much silence */
    uint64_t last_message_ns;
    struct gp_staging staging;
};

/* Fds a reply passes (SCM_RIGHTS), owned by the handler's side; with
 * close_after, made for the reply alone: the server closes them once sent. */
struct gp_fds {
    const int *fds;
    uint32_t count;
    bool close_after;
};

/* Fds a request brought (SCM_RIGHTS). A handler that takes them (and so
 * closes them) sets count to 0; the server closes what is left. */
struct gp_fds_in {
    int *fds;
    uint32_t count;
};

/* One request being served: what it brought and what its reply carries. */
struct gp_request {
    struct gp_client *client;
    uint16_t type;               /* enum gpck_type */
    const void *payload;
    uint32_t len;                /* of payload */
    struct gp_fds_in *given;     /* fds it brought */
    void *reply;                 /* GPCK_MAX_MESSAGE bytes for the reply payload */
    uint32_t reply_len;          /* preset to the reply struct's size (messages.gen.h); a longer reply sets it */
    struct gp_fds send;          /* fds the reply passes (none by default) */
};

/* The payload of a fixed-size request, or NULL when its length is not size. */
static inline const void *gp_request_payload(const struct gp_request *r, size_t size)
{
    return r->len == size ? r->payload : NULL;
}

#endif
