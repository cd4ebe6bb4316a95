#define _GNU_SOURCE
#include "gate.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Every thread that calls the driver owns a slot: its depth (calls it has
 * in flight) and its call count, both written only by that thread, so
 * entering and leaving are plain loads and stores, no locked instruction
 * (with three per call, as striped counters had, a wrapped driver call
 * cost 28 ns more than the driver's own; now 4-8 ns: docs/BENCHMARKS.md).
 *
 * Entering stores depth+1 then loads `state`; closing stores `state` then
 * reads every depth. Without a fence between each side's store and load,
 * both could miss the other's store (the store buffer). The fence goes on
 * the rare side: after closing, membarrier(PRIVATE_EXPEDITED) runs a full
 * barrier on every CPU running a thread of this process (a thread not
 * running passed one when it was switched out), so a caller either sees the
 * gate closed and backs out, or the closer sees its depth. Where the kernel
 * has no such membarrier, every entry fences instead. */

#define STATE_CLOSED 1
#define STATE_BYPASS 2

struct gate_slot {
    atomic_long depth;
    atomic_ulong calls;
    atomic_int taken;
    atomic_bool exempt; /* passes a closed gate (gp_gate_exempt_self) */
    bool shared; /* the fallback slot: several threads, locked updates */
    struct gate_slot *next;
} __attribute__((aligned(64)));

static _Atomic(struct gate_slot *) slots;
/* For a thread whose slot could not be allocated. */
static struct gate_slot shared_slot = { .taken = 1, .shared = true };
static atomic_int state;
static atomic_bool entry_fences = true; /* until membarrier is known to work */
static uint64_t closed_at_ns;
static pthread_mutex_t wait_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reopened = PTHREAD_COND_INITIALIZER;
static pthread_key_t slot_key;
static bool slot_key_made;
/* initial-exec: one %fs-relative load, not a __tls_get_addr call; the shim
 * is preloaded, so its TLS is in the static block. */
static __thread struct gate_slot *my_slot __attribute__((tls_model("initial-exec")));

uint64_t gp_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int membarrier(int cmd)
{
    return (int)syscall(SYS_membarrier, cmd, 0, 0);
}

/* ---- slots ---- */

/* At thread exit no call of the thread is in flight, even one it was
 * cancelled in: the next thread starts from a depth of 0. */
static void release_slot(void *p)
{
    struct gate_slot *s = p;
    my_slot = NULL;
    if (!s || s->shared)
        return;
    atomic_store_explicit(&s->depth, 0, memory_order_release);
    atomic_store_explicit(&s->exempt, false, memory_order_relaxed);
    atomic_store_explicit(&s->taken, 0, memory_order_release);
}

static struct gate_slot *claim_slot(void)
{
    struct gate_slot *s;
    for (s = atomic_load(&slots); s; s = s->next) {
        int free_slot = 0;
        if (atomic_compare_exchange_strong(&s->taken, &free_slot, 1))
            break;
    }
    if (!s) {
        s = aligned_alloc(64, sizeof *s);
        if (!s)
            return &shared_slot;
        *s = (struct gate_slot){ .taken = 1 };
        /* A seq_cst RMW: a closer that walked the list before this slot
         * was in it stored `state` before, and the load that follows in
         * gp_gate_enter sees it. */
        struct gate_slot *head = atomic_load(&slots);
        do
            s->next = head;
        while (!atomic_compare_exchange_weak(&slots, &head, s));
    }
    /* Released at thread exit for a later thread; a driver call from a
     * later TLS destructor claims one again (destructors run again). */
    if (slot_key_made)
        pthread_setspecific(slot_key, s);
    return s;
}

static void depth_add(struct gate_slot *s, long d)
{
    if (__builtin_expect(s->shared, 0)) {
        atomic_fetch_add(&s->depth, d);
        return;
    }
    long now = atomic_load_explicit(&s->depth, memory_order_relaxed) + d;
    /* release on the way out: the call's effects before the closer's read */
    atomic_store_explicit(&s->depth, now, d > 0 ? memory_order_relaxed : memory_order_release);
}

/* ---- callers ---- */

static void wait_while_closed(struct gate_slot *s)
{
    if (atomic_load(&s->exempt))
        return;
    for (;;) {
        depth_add(s, -1);
        pthread_mutex_lock(&wait_lock);
        while (atomic_load(&state) == STATE_CLOSED)
            pthread_cond_wait(&reopened, &wait_lock);
        pthread_mutex_unlock(&wait_lock);
        depth_add(s, 1);
        atomic_thread_fence(memory_order_seq_cst);
        if (atomic_load_explicit(&state, memory_order_relaxed) != STATE_CLOSED)
            return;
    }
}

void gp_gate_enter(void)
{
    struct gate_slot *s = my_slot;
    if (__builtin_expect(!s, 0))
        s = my_slot = claim_slot();
    depth_add(s, 1);
    if (__builtin_expect(atomic_load_explicit(&entry_fences, memory_order_relaxed), 0))
        atomic_thread_fence(memory_order_seq_cst);
    else
        atomic_signal_fence(memory_order_seq_cst); /* the compiler's order only */
    /* Bypass passes: the depth it counts is never waited for. */
    if (__builtin_expect(atomic_load_explicit(&state, memory_order_relaxed) == STATE_CLOSED, 0))
        wait_while_closed(s);
    if (__builtin_expect(s->shared, 0))
        atomic_fetch_add_explicit(&s->calls, 1, memory_order_relaxed);
    else
        atomic_store_explicit(&s->calls, atomic_load_explicit(&s->calls, memory_order_relaxed) + 1,
                              memory_order_relaxed);
}

void gp_gate_exit(void)
{
    depth_add(my_slot, -1);
}

void *gp_gate_exempt_self(bool on)
{
    struct gate_slot *s = my_slot;
    if (!s)
        s = my_slot = claim_slot();
    if (s->shared) /* the fallback slot is other threads' too */
        return NULL;
    atomic_store(&s->exempt, on);
    return s;
}

void gp_gate_exempt_end(void *slot)
{
    if (slot)
        atomic_store(&((struct gate_slot *)slot)->exempt, false);
}

/* ---- the closer ---- */

/* A full barrier on every CPU running a thread of this process. A process
 * brought back by CRIU may have lost its registration: register again. If
 * membarrier fails anyway, changing a page's protection makes the kernel
 * interrupt every CPU that may cache this process's mappings, a full
 * barrier on x86 and arm64 alike. */
static void barrier_everywhere(void)
{
    if (atomic_load(&entry_fences))
        return; /* each entry fenced itself */
    if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
        return;
    if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 &&
        membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
        return;
    static char *page;
    if (!page) {
        page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (page == MAP_FAILED) {
            page = NULL;
            return;
        }
    }
    *(volatile char *)page = 1; /* present, so protecting it flushes TLBs */
    mprotect(page, 4096, PROT_READ);
    mprotect(page, 4096, PROT_READ | PROT_WRITE);
}

static long in_flight(void)
{
    long n = atomic_load(&shared_slot.depth);
    for (struct gate_slot *s = atomic_load(&slots); s; s = s->next)
        n += atomic_load_explicit(&s->depth, memory_order_acquire);
    return n;
}

int gp_gate_close(uint32_t timeout_ms, uint64_t *drain_ns)
{
    uint64_t t0 = gp_now_ns();
    pthread_mutex_lock(&wait_lock);
    int open = 0;
    atomic_compare_exchange_strong(&state, &open, STATE_CLOSED);
    closed_at_ns = t0;
    pthread_mutex_unlock(&wait_lock);
    barrier_everywhere();
    /* Calls in flight are usually microseconds from returning; poll with a
     * short, growing sleep rather than adding a wake-up to every exit. */
    long sleep_ns = 2000;
    while (atomic_load(&state) == STATE_CLOSED && in_flight() > 0) {
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
    int closed = STATE_CLOSED;
    uint64_t was = atomic_compare_exchange_strong(&state, &closed, 0) ? gp_now_ns() - closed_at_ns : 0;
    pthread_cond_broadcast(&reopened);
    pthread_mutex_unlock(&wait_lock);
    return was;
}

bool gp_gate_is_closed(void)
{
    return atomic_load(&state) == STATE_CLOSED;
}

uint64_t gp_gate_calls(void)
{
    uint64_t n = atomic_load_explicit(&shared_slot.calls, memory_order_relaxed);
    for (struct gate_slot *s = atomic_load(&slots); s; s = s->next)
        n += atomic_load_explicit(&s->calls, memory_order_relaxed);
    return n;
}

/* Called in a child of fork or before any thread starts: no lock (one the
 * parent held at the fork stays held in the child), and no waiter to wake. */
void gp_gate_bypass(void)
{
    atomic_store(&state, STATE_BYPASS);
}

/* The child of fork has only the forking thread: the slots of the others
 * (a call in flight in one of them included) are free again, and so is the
 * lock, which a closer may have held at the fork. */
static void after_fork_in_child(void)
{
    pthread_mutex_init(&wait_lock, NULL);
    pthread_cond_init(&reopened, NULL);
    for (struct gate_slot *s = atomic_load(&slots); s; s = s->next) {
        if (s == my_slot)
            continue;
        atomic_store(&s->depth, 0);
        atomic_store(&s->taken, 0);
    }
    if (my_slot != &shared_slot)
        atomic_store(&shared_slot.depth, 0);
}

__attribute__((constructor)) static void gate_init(void)
{
    slot_key_made = pthread_key_create(&slot_key, release_slot) == 0;
    pthread_atfork(NULL, NULL, after_fork_in_child);
    int cmds = membarrier(MEMBARRIER_CMD_QUERY);
    if (cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
        membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0)
        atomic_store(&entry_fences, false);
}
