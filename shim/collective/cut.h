/* The cut: stopping every rank of a job at the same collective boundary.
 *
 * A unit is what one thread launches on its communicators in one go: a
 * collective or point-to-point call outside a group, or a whole group
 * (ncclGroupStart at depth 0 to its ncclGroupEnd); creating and destroying
 * a communicator are units too. Units are counted per communicator (ops)
 * when they end; those under way are counted as in flight.
 *
 * While the cut holds, a thread about to start a unit waits unless the
 * controller's target for a communicator it uses is above what was done
 * there: ranks behind catch up, none runs ahead. When every rank has no
 * unit under way and the same count on every communicator, every launched
 * collective has all its peers launched: the GPUs drain, and nothing waits
 * on a peer. docs/ARCHITECTURE.md ("Distributed jobs") has the whole story. */
#ifndef GPUCKPT_CUT_H
#define GPUCKPT_CUT_H

#include <stdbool.h>
#include <stdint.h>

#include "communicators.h"

enum gp_unit_kind {
    GP_UNIT_OP,        /* on one known communicator */
    GP_UNIT_GROUP,     /* communicators known only as its calls come */
    GP_UNIT_LIFECYCLE, /* making or destroying communicators */
};

/* Before a unit: waits while the cut holds it back. c: GP_UNIT_OP's. */
void gp_cut_enter(enum gp_unit_kind kind, struct gp_comm *c);
/* A call inside the thread's group, on c (counted when the group ends). */
void gp_cut_touch(struct gp_comm *c);
/* After a unit: launched says whether its calls reached the GPUs (a
 * simulated group end launches nothing). */
void gp_cut_leave(bool launched);
/* The thread's group depth, as the application sees it. */
int gp_cut_group_depth(void);
void gp_cut_group_push(void);
/* Returns the depth after. */
int gp_cut_group_pop(void);

/* Controller side. owner: who holds the cut (released when it goes). */
struct gp_cut_target {
    uint64_t key;
    uint64_t target;
};
/* Starts holding (targets: what was done) or, with targets, lets units
 * pass on those communicators until their counts reach them. -EBUSY: held
 * by another owner. */
int gp_cut_hold(const void *owner, const struct gp_cut_target *targets, uint32_t count);
/* Lets every waiting unit go. -EPERM: not the owner's; -EBUSY: a
 * communicator is torn down (only a rebuild may let the job go on). */
int gp_cut_release(const void *owner);
/* The owner went away: release if nothing is torn down, else keep holding
 * for the next controller (gpuckpt resume). */
void gp_cut_owner_gone(const void *owner);
bool gp_cut_held(void);
bool gp_cut_held_by(const void *owner);
/* Units under way, and threads waiting at the cut. */
void gp_cut_counts(uint32_t *busy, uint32_t *waiting);
/* Every communicator's count is its target and no unit is under way. */
bool gp_cut_reached(void);

#endif
