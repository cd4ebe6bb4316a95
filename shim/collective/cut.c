#define _GNU_SOURCE
#include "cut.h"

#include <errno.h>
#include <pthread.h>

#include "../interpose/log.h"

#define MAX_TOUCHED 64

static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static bool holding;
static const void *holder;
static uint32_t busy, waiting;

/* The thread's own unit. */
static __thread int group_depth;
static __thread struct gp_comm *touched[MAX_TOUCHED];
static __thread int touched_count;

static bool may_pass(enum gp_unit_kind kind, struct gp_comm *c)
{
    if (!holding)
        return true;
    if (kind == GP_UNIT_OP)
        return c->real && c->ops < c->target;
    if (kind == GP_UNIT_LIFECYCLE)
        return false;
    for (struct gp_comm *o = gp_comm_list(); o; o = o->next)
        if (o->real && o->ops < o->target)
            return true;
    return false;
}

static void touch_locked(struct gp_comm *c)
{
    for (int i = 0; i < touched_count; i++)
        if (touched[i] == c)
            return;
    if (touched_count == MAX_TOUCHED) {
        GP_WARN("nccl", "a group uses more than %d communicators: the cut counts the first %d", MAX_TOUCHED, MAX_TOUCHED);
        return;
    }
    touched[touched_count++] = c;
    c->inflight++;
}

void gp_cut_enter(enum gp_unit_kind kind, struct gp_comm *c)
{
    pthread_mutex_lock(&gp_comms_lock);
    while (!may_pass(kind, c)) {
        waiting++;
        pthread_cond_wait(&changed, &gp_comms_lock);
        waiting--;
    }
    busy++;
    touched_count = 0;
    if (c)
        touch_locked(c);
    pthread_mutex_unlock(&gp_comms_lock);
}

void gp_cut_touch(struct gp_comm *c)
{
    pthread_mutex_lock(&gp_comms_lock);
    touch_locked(c);
    pthread_mutex_unlock(&gp_comms_lock);
}

void gp_cut_leave(bool launched)
{
    pthread_mutex_lock(&gp_comms_lock);
    for (int i = 0; i < touched_count; i++) {
        /* A communicator the unit destroyed is gone from the list. */
        if (!gp_comm_list_has(touched[i]))
            continue;
        touched[i]->inflight--;
        if (launched)
            touched[i]->ops++;
    }
    touched_count = 0;
    busy--;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&gp_comms_lock);
}

int gp_cut_group_depth(void)
{
    return group_depth;
}

void gp_cut_group_push(void)
{
    group_depth++;
}

int gp_cut_group_pop(void)
{
    return group_depth > 0 ? --group_depth : 0;
}

int gp_cut_hold(const void *owner, const struct gp_cut_target *targets, uint32_t count)
{
    pthread_mutex_lock(&gp_comms_lock);
    if (holding && holder && holder != owner) {
        pthread_mutex_unlock(&gp_comms_lock);
        return -EBUSY;
    }
    if (!holding)
        for (struct gp_comm *c = gp_comm_list(); c; c = c->next)
            c->target = c->ops;
    holding = true;
    holder = owner;
    for (uint32_t i = 0; i < count; i++)
        for (struct gp_comm *c = gp_comm_list(); c; c = c->next)
            if (c->key == targets[i].key && targets[i].target > c->target)
                c->target = targets[i].target;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&gp_comms_lock);
    return 0;
}

static bool any_torn_down(void)
{
    for (struct gp_comm *c = gp_comm_list(); c; c = c->next)
        if (!c->real)
            return true;
    return false;
}

int gp_cut_release(const void *owner)
{
    pthread_mutex_lock(&gp_comms_lock);
    int err = 0;
    if (holding && holder && holder != owner)
        err = -EPERM;
    else if (any_torn_down())
        err = -EBUSY;
    else
        holding = false;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&gp_comms_lock);
    return err;
}

void gp_cut_owner_gone(const void *owner)
{
    pthread_mutex_lock(&gp_comms_lock);
    if (holding && holder == owner) {
        if (any_torn_down()) {
            holder = NULL; /* any controller may carry on */
            GP_INFO("nccl", "controller gone with communicators torn down: the job waits for a resume");
        } else {
            holding = false;
            pthread_cond_broadcast(&changed);
        }
    }
    pthread_mutex_unlock(&gp_comms_lock);
}

bool gp_cut_held(void)
{
    pthread_mutex_lock(&gp_comms_lock);
    bool h = holding;
    pthread_mutex_unlock(&gp_comms_lock);
    return h;
}

bool gp_cut_held_by(const void *owner)
{
    pthread_mutex_lock(&gp_comms_lock);
    bool h = holding && (holder == owner || holder == NULL);
    pthread_mutex_unlock(&gp_comms_lock);
    return h;
}

void gp_cut_counts(uint32_t *b, uint32_t *w)
{
    pthread_mutex_lock(&gp_comms_lock);
    *b = busy;
    *w = waiting;
    pthread_mutex_unlock(&gp_comms_lock);
}

bool gp_cut_reached(void)
{
    pthread_mutex_lock(&gp_comms_lock);
    bool reached = holding && busy == 0;
    for (struct gp_comm *c = gp_comm_list(); reached && c; c = c->next)
        reached = c->ops == c->target && c->inflight == 0;
    pthread_mutex_unlock(&gp_comms_lock);
    return reached;
}
