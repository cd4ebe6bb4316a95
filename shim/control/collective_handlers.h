/* Handlers of the NCCL messages (GPCK_NCCL_*): the cut, the teardown and
 * the rebuild of a distributed job's communicators (shim/collective/). */
#ifndef GPUCKPT_CONTROL_COLLECTIVE_HANDLERS_H
#define GPUCKPT_CONTROL_COLLECTIVE_HANDLERS_H

#include "request.h"

int handle_nccl_status(struct gp_request *r);
int handle_nccl_hold(struct gp_request *r);
int handle_nccl_teardown(struct gp_request *r);
int handle_nccl_new_id(struct gp_request *r);
int handle_nccl_rebuild(struct gp_request *r);
/* The client went away: its cut is let go, unless communicators are torn down. */
void gp_collective_client_gone(struct gp_client *c);

#endif
