/* Unit tests of the gate: closing blocks new calls, waits for calls in
 * flight, reopening releases the blocked threads, and a call that never
 * returns makes close time out and reopen. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gate.h"
#include "harness.h"

static atomic_int entered, finished, release_inflight;

static void *call_and_hold(void *arg)
{
    (void)arg;
    gp_gate_enter();
    atomic_fetch_add(&entered, 1);
    while (!atomic_load(&release_inflight))
        usleep(100);
    gp_gate_exit();
    atomic_fetch_add(&finished, 1);
    return NULL;
}

static void *quick_call(void *arg)
{
    (void)arg;
    gp_gate_enter();
    atomic_fetch_add(&entered, 1);
    gp_gate_exit();
    atomic_fetch_add(&finished, 1);
    return NULL;
}

static void reset(void)
{
    atomic_store(&entered, 0);
    atomic_store(&finished, 0);
    atomic_store(&release_inflight, 0);
}

/* A thread inside a call until release_inflight, once it is in. */
static pthread_t start_holder(void)
{
    pthread_t holder;
    pthread_create(&holder, NULL, call_and_hold, NULL);
    while (!atomic_load(&entered))
        usleep(100);
    return holder;
}

static void test_close_blocks_new_calls(void)
{
    reset();
    uint64_t drain;
    CHECK(gp_gate_close(1000, &drain) == 0);
    CHECK(gp_gate_is_closed());
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, quick_call, NULL);
    usleep(50000);
    CHECK(atomic_load(&entered) == 0);
    uint64_t closed = gp_gate_open();
    CHECK(closed > 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    CHECK(atomic_load(&finished) == 4);
}

/* close must not return while a call is inside the driver. */
static void *closer(void *arg)
{
    int *rc = arg;
    uint64_t drain;
    *rc = gp_gate_close(5000, &drain);
    return NULL;
}

static void test_close_waits_for_calls_in_flight(void)
{
    reset();
    pthread_t holder = start_holder(), c;
    int rc = -1;
    pthread_create(&c, NULL, closer, &rc);
    usleep(50000);
    CHECK(rc == -1); /* still draining */
    atomic_store(&release_inflight, 1);
    pthread_join(c, NULL);
    CHECK(rc == 0);
    CHECK(atomic_load(&finished) == 1);
    gp_gate_open();
    pthread_join(holder, NULL);
}

static void test_close_times_out_and_reopens(void)
{
    reset();
    pthread_t holder = start_holder();
    uint64_t drain;
    CHECK(gp_gate_close(100, &drain) == -ETIMEDOUT);
    CHECK(!gp_gate_is_closed());
    atomic_store(&release_inflight, 1);
    pthread_join(holder, NULL);
}

static void *hammer(void *arg)
{
    atomic_int *stop = arg;
    while (!atomic_load(stop)) {
        gp_gate_enter();
        gp_gate_exit();
    }
    return NULL;
}

/* Many threads hammering the gate while it closes and opens repeatedly:
 * every close drains (no call is inside while closed). */
static atomic_int inside;
static void *hammer_counting(void *arg)
{
    atomic_int *stop = arg;
    while (!atomic_load(stop)) {
        gp_gate_enter();
        atomic_fetch_add(&inside, 1);
        atomic_fetch_sub(&inside, 1);
        gp_gate_exit();
    }
    return NULL;
}

static void test_many_threads_close_open(void)
{
    atomic_int stop = 0;
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, i % 2 ? hammer : hammer_counting, &stop);
    /* Let the hammers get going before and between rounds, so the gate is
     * closed on calls really in flight (on a loaded machine they may not
     * have been scheduled yet). */
    uint64_t calls_before = gp_gate_calls();
    while (gp_gate_calls() == calls_before)
        usleep(100);
    calls_before = gp_gate_calls();
    for (int round = 0; round < 200; round++) {
        uint64_t drain;
        CHECK(gp_gate_close(5000, &drain) == 0);
        CHECK(atomic_load(&inside) == 0);
        gp_gate_open();
        usleep(200);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    CHECK(gp_gate_calls() > calls_before);
}

/* A thread that ended inside no call leaves nothing to wait for, and its
 * slot serves the next thread: close drains at once. */
static void test_ended_threads_leave_no_call(void)
{
    reset();
    uint64_t calls_before = gp_gate_calls();
    for (int i = 0; i < 50; i++) {
        pthread_t t;
        pthread_create(&t, NULL, quick_call, NULL);
        pthread_join(t, NULL);
    }
    CHECK(atomic_load(&finished) == 50);
    CHECK(gp_gate_calls() - calls_before == 50);
    uint64_t drain;
    CHECK(gp_gate_close(100, &drain) == 0);
    gp_gate_open();
}

/* A thread cancelled inside a call (the call abandoned with it) does not
 * hold the gate open for good. */
static void test_cancelled_thread_leaves_no_call(void)
{
    reset();
    pthread_t holder = start_holder();
    pthread_cancel(holder); /* in usleep, a cancellation point */
    pthread_join(holder, NULL);
    uint64_t drain;
    CHECK(gp_gate_close(200, &drain) == 0);
    gp_gate_open();
}

/* The child of a fork has only the forking thread: a call another thread of
 * the parent had in flight does not hold the child's gate. */
static void test_fork_child_drains(void)
{
    reset();
    pthread_t holder = start_holder();
    pid_t pid = fork();
    if (pid == 0) {
        uint64_t drain;
        int rc = gp_gate_close(200, &drain);
        gp_gate_open();
        gp_gate_enter(); /* the forking thread's own calls still pass */
        gp_gate_exit();
        _exit(rc == 0 ? 0 : 1);
    }
    CHECK(pid > 0);
    int status = -1;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    uint64_t drain;
    CHECK(gp_gate_close(100, &drain) == -ETIMEDOUT); /* the parent's call is still in flight */
    atomic_store(&release_inflight, 1);
    pthread_join(holder, NULL);
}

/* An exempt thread calls through a closed gate; once its exemption is
 * ended from another thread, it waits like any other. */
static void *exempt_calls(void *arg)
{
    void **slot = arg;
    *slot = gp_gate_exempt_self(true);
    gp_gate_enter();
    gp_gate_exit();
    atomic_fetch_add(&finished, 1);
    while (atomic_load(&release_inflight) == 0)
        usleep(100);
    gp_gate_enter();
    atomic_fetch_add(&entered, 1);
    gp_gate_exit();
    return NULL;
}

static void test_exempt_thread_passes_until_ended(void)
{
    reset();
    uint64_t drain;
    CHECK(gp_gate_close(1000, &drain) == 0);
    void *slot = NULL;
    pthread_t t;
    pthread_create(&t, NULL, exempt_calls, &slot);
    for (int i = 0; i < 1000 && atomic_load(&finished) == 0; i++)
        usleep(1000);
    CHECK(atomic_load(&finished) == 1); /* passed the closed gate */
    CHECK(slot != NULL);
    gp_gate_exempt_end(slot);
    atomic_store(&release_inflight, 1);
    usleep(50000);
    CHECK(atomic_load(&entered) == 0); /* waits now */
    gp_gate_open();
    pthread_join(t, NULL);
    CHECK(atomic_load(&entered) == 1);
}

static void test_bypass_never_blocks(void)
{
    reset();
    uint64_t drain;
    CHECK(gp_gate_close(1000, &drain) == 0);
    gp_gate_bypass();
    pthread_t t;
    pthread_create(&t, NULL, quick_call, NULL);
    pthread_join(t, NULL);
    CHECK(atomic_load(&finished) == 1);
}

int main(void)
{
    RUN(test_close_blocks_new_calls);
    RUN(test_close_waits_for_calls_in_flight);
    RUN(test_close_times_out_and_reopens);
    RUN(test_many_threads_close_open);
    RUN(test_ended_threads_leave_no_call);
    RUN(test_cancelled_thread_leaves_no_call);
    RUN(test_fork_child_drains);
    RUN(test_exempt_thread_passes_until_ended);
    RUN(test_bypass_never_blocks); /* last: bypass is for good */
    return HARNESS_END();
}
