/* The control server: one thread per process, serving the protocol of
 * gpuckpt_protocol.h on <run dir>/<pid>.sock to peers of the same uid.
 * It registers these with the shim at load (gp_shim_register_control). */
#ifndef GPUCKPT_CONTROL_SERVER_H
#define GPUCKPT_CONTROL_SERVER_H

#include "../interpose/config.h"

int gp_control_server_start(const struct gp_config *cfg);
/* At exit: removes the socket file. */
void gp_control_server_stop(void);
/* In a forked child: the socket belongs to the parent; never touch it. */
void gp_control_server_forget(void);

#endif
