/* Unit tests of the cut (shim/collective/cut.c) in one process: units wait
 * while it holds, pass while their communicator is below its target and
 * no further, a group counts once, making and ending communicators wait,
 * and a controller gone leaves a torn-down job held for the next one. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "communicators.h"
#include "cut.h"
#include "harness.h"

static const int owner_a = 1, owner_b = 2;
static atomic_int done;

struct op_args {
    struct gp_comm *c;
    int units;
};

/* What an op wrapper does, units times. */
static void *run_ops(void *arg)
{
    struct op_args *a = arg;
    for (int i = 0; i < a->units; i++) {
        gp_cut_enter(GP_UNIT_OP, a->c);
        gp_cut_leave(true);
        atomic_fetch_add(&done, 1);
    }
    return NULL;
}

/* A group of two calls on each of c and d. */
static void *run_group(void *arg)
{
    struct gp_comm **cd = arg;
    gp_cut_enter(GP_UNIT_GROUP, NULL);
    gp_cut_group_push();
    gp_cut_touch(cd[0]);
    gp_cut_touch(cd[0]);
    gp_cut_touch(cd[1]);
    if (gp_cut_group_pop() == 0)
        gp_cut_leave(true);
    atomic_fetch_add(&done, 1);
    return NULL;
}

static void *run_lifecycle(void *arg)
{
    (void)arg;
    gp_cut_enter(GP_UNIT_LIFECYCLE, NULL);
    gp_cut_leave(false);
    atomic_fetch_add(&done, 1);
    return NULL;
}

static void settle(void)
{
    usleep(30000);
}

static struct gp_comm *new_comm(uint64_t key)
{
    return gp_comm_add((ncclComm_t)(uintptr_t)(0x1000 + key), key, NULL, 2, 0, 0, false);
}

static void test_units_pass_up_to_their_target(void)
{
    struct gp_comm *c = new_comm(1);
    atomic_store(&done, 0);
    CHECK(gp_cut_hold(&owner_a, NULL, 0) == 0);
    CHECK(gp_cut_reached());
    struct op_args a = { c, 5 };
    pthread_t t;
    pthread_create(&t, NULL, run_ops, &a);
    settle();
    CHECK(atomic_load(&done) == 0); /* held at its first unit */
    uint32_t busy, waiting;
    gp_cut_counts(&busy, &waiting);
    CHECK(busy == 0 && waiting == 1);
    struct gp_cut_target to3 = { 1, 3 };
    CHECK(gp_cut_hold(&owner_a, &to3, 1) == 0);
    settle();
    CHECK(atomic_load(&done) == 3); /* caught up, not beyond */
    CHECK(c->ops == 3 && c->inflight == 0);
    CHECK(gp_cut_reached());
    CHECK(gp_cut_hold(&owner_b, NULL, 0) == -EBUSY); /* another controller */
    CHECK(gp_cut_release(&owner_b) == -EPERM);
    CHECK(gp_cut_release(&owner_a) == 0);
    pthread_join(t, NULL);
    CHECK(atomic_load(&done) == 5 && c->ops == 5);
}

static void test_a_group_is_one_unit_per_communicator(void)
{
    struct gp_comm *c = new_comm(2), *d = new_comm(3);
    atomic_store(&done, 0);
    CHECK(gp_cut_hold(&owner_a, NULL, 0) == 0);
    struct gp_comm *cd[2] = { c, d };
    pthread_t t;
    pthread_create(&t, NULL, run_group, cd);
    settle();
    CHECK(atomic_load(&done) == 0); /* nothing below target: the group waits */
    struct gp_cut_target to1 = { 2, 1 };
    CHECK(gp_cut_hold(&owner_a, &to1, 1) == 0);
    pthread_join(t, NULL);
    CHECK(c->ops == 1 && d->ops == 1); /* both counted once, d beyond its target */
    CHECK(!gp_cut_reached());
    struct gp_cut_target to1d = { 3, 1 };
    CHECK(gp_cut_hold(&owner_a, &to1d, 1) == 0);
    CHECK(gp_cut_reached());
    CHECK(gp_cut_release(&owner_a) == 0);
}

static void test_lifecycle_waits_while_held(void)
{
    atomic_store(&done, 0);
    CHECK(gp_cut_hold(&owner_a, NULL, 0) == 0);
    pthread_t t;
    pthread_create(&t, NULL, run_lifecycle, NULL);
    settle();
    CHECK(atomic_load(&done) == 0);
    CHECK(gp_cut_release(&owner_a) == 0);
    pthread_join(t, NULL);
    CHECK(atomic_load(&done) == 1);
}

static void test_controller_gone(void)
{
    struct gp_comm *c = new_comm(4);
    /* Up: its holder leaving lets the job go. */
    CHECK(gp_cut_hold(&owner_a, NULL, 0) == 0);
    gp_cut_owner_gone(&owner_a);
    CHECK(!gp_cut_held());
    /* Torn down: the job stays held, for any controller to carry on. */
    CHECK(gp_cut_hold(&owner_a, NULL, 0) == 0);
    ncclComm_t real = c->real;
    c->real = NULL;
    CHECK(gp_cut_release(&owner_a) == -EBUSY);
    gp_cut_owner_gone(&owner_a);
    CHECK(gp_cut_held());
    CHECK(gp_cut_hold(&owner_b, NULL, 0) == 0);
    c->real = real;
    CHECK(gp_cut_release(&owner_b) == 0);
    CHECK(!gp_cut_held());
}

static void test_keys(void)
{
    ncclUniqueId a = { { 1 } }, b = { { 2 } };
    CHECK(gp_comm_key_of_ids(&a, 1) == gp_comm_key_of_ids(&a, 1));
    CHECK(gp_comm_key_of_ids(&a, 1) != gp_comm_key_of_ids(&b, 1));
    uint64_t k = gp_comm_key_of_ids(&a, 1);
    CHECK(gp_comm_key_of_split(k, 0, 0) != gp_comm_key_of_split(k, 1, 0));
    CHECK(gp_comm_key_of_split(k, 0, 0) != gp_comm_key_of_split(k, 0, 1));
}

int main(void)
{
    RUN(test_units_pass_up_to_their_target);
    RUN(test_a_group_is_one_unit_per_communicator);
    RUN(test_lifecycle_waits_while_held);
    RUN(test_controller_gone);
    RUN(test_keys);
    return HARNESS_END();
}
