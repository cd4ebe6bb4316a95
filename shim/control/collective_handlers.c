#define _GNU_SOURCE
#include "collective_handlers.h"

#include <errno.h>
#include <string.h>

#include "../collective/communicators.h"
#include "../collective/cut.h"
#include "../collective/rebuild.h"
#include "../interpose/driver_error.h"

static void fill_status(const struct gp_client *c, struct gpck_nccl_rep *rep)
{
    memset(rep, 0, sizeof(*rep));
    gp_cut_counts(&rep->busy, &rep->waiting);
    if (gp_cut_held())
        rep->flags |= GPCK_NCCL_HELD;
    if (gp_cut_held_by(c))
        rep->flags |= GPCK_NCCL_HELD_BY_SENDER;
    if (gp_cut_reached())
        rep->flags |= GPCK_NCCL_REACHED;
    pthread_mutex_lock(&gp_comms_lock);
    rep->mem_allocations = (uint64_t)gp_comm_mem_allocations();
    for (struct gp_comm *m = gp_comm_list(); m && rep->count < GPCK_MAX_COMMS; m = m->next) {
        rep->comms[rep->count++] = (struct gpck_nccl_comm){
            .key = m->key,
            .ops = m->ops,
            .target = m->target,
            .nranks = m->nranks,
            .rank = m->rank,
            .device = m->device,
            .inflight = m->inflight,
            .registrations = m->registrations,
            .windows = m->windows,
            .custom_ops = m->custom_ops,
            .flags = (m->real ? 0 : GPCK_COMM_DOWN) | (m->multi_device ? GPCK_COMM_MULTI_DEVICE : 0),
        };
    }
    pthread_mutex_unlock(&gp_comms_lock);
}

int handle_nccl_status(struct gp_request *r)
{
    fill_status(r->client, r->reply);
    return 0;
}

int handle_nccl_hold(struct gp_request *r)
{
    const struct gpck_nccl_hold_req *req = r->payload;
    if (r->len < sizeof(*req) || req->count > GPCK_MAX_COMMS || r->len != sizeof(*req) + req->count * sizeof(req->targets[0]))
        return -EPROTO;
    if (req->flags & ~GPCK_NCCL_RELEASE)
        return -EINVAL;
    int err;
    if (req->flags & GPCK_NCCL_RELEASE) {
        err = gp_cut_release(r->client);
    } else {
        struct gp_cut_target targets[GPCK_MAX_COMMS];
        for (uint32_t i = 0; i < req->count; i++)
            targets[i] = (struct gp_cut_target){ req->targets[i].key, req->targets[i].target };
        err = gp_cut_hold(r->client, targets, req->count);
        if (!err)
            r->client->holds_cut = true;
    }
    if (err)
        return err;
    fill_status(r->client, r->reply);
    return 0;
}

/* A failure of NCCL's: its one line goes with the reply. */
static int failed(int err, const char *why)
{
    if (err && why[0])
        gp_failure_note(why);
    return err;
}

int handle_nccl_teardown(struct gp_request *r)
{
    if (!gp_cut_held_by(r->client))
        return -EPERM;
    char why[200] = "";
    return failed(gp_nccl_teardown(why, sizeof(why)), why);
}

int handle_nccl_new_id(struct gp_request *r)
{
    struct gpck_nccl_id *rep = r->reply;
    char why[200] = "";
    return failed(gp_nccl_new_id((ncclUniqueId *)rep->id, why, sizeof(why)), why);
}

int handle_nccl_rebuild(struct gp_request *r)
{
    const struct gpck_nccl_rebuild_req *req = gp_request_payload(r, sizeof(struct gpck_nccl_rebuild_req));
    if (!req)
        return -EPROTO;
    if (!gp_cut_held_by(r->client))
        return -EPERM;
    char why[200] = "";
    return failed(gp_nccl_rebuild(req->key, (const ncclUniqueId *)req->id, why, sizeof(why)), why);
}

void gp_collective_client_gone(struct gp_client *c)
{
    if (c->holds_cut)
        gp_cut_owner_gone(c);
    c->holds_cut = false;
}
