/* Handlers of the control protocol's requests, one per message type. The
 * server (server.c) owns sockets and framing; these own semantics. */
#ifndef GPUCKPT_CONTROL_HANDLERS_H
#define GPUCKPT_CONTROL_HANDLERS_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "request.h"

/* Handles one request by its handler (handle_<name>, listed in
 * messages.gen.h from protocol/messages.mjs). Returns the reply's status:
 * 0 or -errno. */
int gp_handle_request(struct gp_request *r);
/* The fds of a reply were sent: the handler's side closes them. */
void gp_client_fds_sent(struct gp_client *c);
/* The client went away or its lease expired: reopen the gate if it held it,
 * drop its staging memory. */
void gp_client_release(struct gp_client *c);
/* Reopens the gate if c holds it, logging why. */
void gp_client_drop_gate(struct gp_client *c, const char *why);
/* True if any client holds the gate closed. */
bool gp_gate_held(void);

#endif
