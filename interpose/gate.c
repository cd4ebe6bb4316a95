#define _GNU_SOURCE
#include "gate.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

/* Calls in flight are counted on striped, cache-line-sized counters so that
 * threads launching kernels concurrently do not bounce one line between
 * cores; the closer sums the stripes. Entry publishes the increment before
 * reading `closed`, and close publishes `closed` before summing (both
 * seq_cst): either the caller sees the gate closed and backs out, or the
 * closer sees the caller in flight and waits for it. */
#define STRIPES 64

struct stripe {
    atomic_long in_flight;
    atomic_ulong calls;
} __attribute__((aligned(64)));

static struct stripe stripes[STRIPES];
static atomic_int closed;
static atomic_int bypass;
static uint64_t closed_at_ns;
static pthread_mutex_t wait_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reopened = PTHREAD_COND_INITIALIZER;
static __thread int my_stripe = -1;
static atomic_uint next_stripe;

uint64_t gp_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct stripe *stripe_of_thread(void)
{
    if (__builtin_expect(my_stripe < 0, 0))
        my_stripe = (int)(atomic_fetch_add_explicit(&next_stripe, 1, memory_order_relaxed) % STRIPES);
    return &stripes[my_stripe];
}

void gp_gate_enter(void)
{
    if (atomic_load_explicit(&bypass, memory_order_relaxed))
        return;
    struct stripe *s = stripe_of_thread();
    for (;;) {
        atomic_fetch_add(&s->in_flight, 1);
        if (!atomic_load(&closed)) {
            atomic_fetch_add_explicit(&s->calls, 1, memory_order_relaxed);
            return;
        }
        atomic_fetch_sub(&s->in_flight, 1);
        pthread_mutex_lock(&wait_lock);
        while (atomic_load(&closed))
            pthread_cond_wait(&reopened, &wait_lock);
        pthread_mutex_unlock(&wait_lock);
    }
}

void gp_gate_exit(void)
{
    if (atomic_load_explicit(&bypass, memory_order_relaxed))
        return;
    atomic_fetch_sub(&stripe_of_thread()->in_flight, 1);
}

static long in_flight(void)
{
    long n = 0;
    for (int i = 0; i < STRIPES; i++)
        n += atomic_load(&stripes[i].in_flight);
    return n;
}

int gp_gate_close(uint32_t timeout_ms, uint64_t *drain_ns)
{
    uint64_t t0 = gp_now_ns();
    pthread_mutex_lock(&wait_lock);
    atomic_store(&closed, 1);
    closed_at_ns = t0;
    pthread_mutex_unlock(&wait_lock);
    /* Calls in flight are usually microseconds from returning; poll with a
     * short, growing sleep rather than adding a wake-up to every exit. */
    long sleep_ns = 2000;
    while (in_flight() > 0) {
        if (gp_now_ns() - t0 > (uint64_t)timeout_ms * 1000000ull) {
            gp_gate_open();
            return -ETIMEDOUT;
        }
        struct timespec ts = { 0, sleep_ns };
        nanosleep(&ts, NULL);
        if (sleep_ns < 1000000)
            sleep_ns *= 2;
    }
    if (drain_ns)
        *drain_ns = gp_now_ns() - t0;
    return 0;
}

uint64_t gp_gate_open(void)
{
    pthread_mutex_lock(&wait_lock);
    uint64_t was = atomic_load(&closed) ? gp_now_ns() - closed_at_ns : 0;
    atomic_store(&closed, 0);
    pthread_cond_broadcast(&reopened);
    pthread_mutex_unlock(&wait_lock);
    return was;
}

bool gp_gate_is_closed(void)
{
    return atomic_load(&closed) != 0;
}

uint64_t gp_gate_calls(void)
{
    uint64_t n = 0;
    for (int i = 0; i < STRIPES; i++)
        n += atomic_load_explicit(&stripes[i].calls, memory_order_relaxed);
    return n;
}

void gp_gate_bypass(void)
{
    atomic_store(&bypass, 1);
    atomic_store(&closed, 0);
}
