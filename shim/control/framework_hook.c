#define _GNU_SOURCE
#include "framework_hook.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../interpose/gate.h"

/* A report holds at most this many ranges: PyTorch's free blocks of a large
 * job number in the thousands; beyond this the smallest are copied. */
#define MAX_REPORTED (1u << 20)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t asked = PTHREAD_COND_INITIALIZER;
static pthread_cond_t answered = PTHREAD_COND_INITIALIZER;
static bool hooked;          /* a hook has waited in this process */
static uint64_t asked_id;    /* the newest request */
static uint64_t taken_id;    /* the newest request a hook took */
static uint64_t answered_id; /* the newest answered */
static uint32_t answer_state;
static char answer_framework[32];
static char answer_why[GPCK_NAME_LEN];
static struct gpck_free_range *answer_ranges;
static uint32_t answer_count;
/* The serving hook's gate slot, exempt until it answers or is given up. */
static void *hook_slot;

static void after_fork_in_child(void)
{
    /* The hook's thread did not come along: a hook in the child waits anew. */
    pthread_mutex_init(&lock, NULL);
    pthread_cond_init(&asked, NULL);
    pthread_cond_init(&answered, NULL);
    hooked = false;
    taken_id = answered_id = asked_id;
}

__attribute__((constructor)) static void framework_hook_init(void)
{
    pthread_atfork(NULL, NULL, after_fork_in_child);
}

static void copy_text(char *dst, size_t size, const char *src)
{
    snprintf(dst, size, "%s", src ? src : "");
    for (char *p = dst; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
}

uint64_t gpuckpt_framework_wait(void)
{
    gp_gate_exempt_self(false);
    pthread_mutex_lock(&lock);
    hooked = true;
    while (taken_id == asked_id)
        pthread_cond_wait(&asked, &lock);
    uint64_t id = taken_id = asked_id;
    hook_slot = gp_gate_exempt_self(true); /* under the lock: a give-up sees it */
    pthread_mutex_unlock(&lock);
    return id;
}

static int by_size_desc(const void *a, const void *b)
{
    uint64_t x = ((const struct gpck_free_range *)a)->size, y = ((const struct gpck_free_range *)b)->size;
    return x < y ? 1 : x > y ? -1 : 0;
}

int gpuckpt_framework_report(uint64_t id, uint32_t state, const char *framework, const char *why, const uint64_t *pairs,
                             uint32_t n)
{
    gp_gate_exempt_self(false);
    if (n > MAX_REPORTED)
        n = MAX_REPORTED;
    struct gpck_free_range *ranges = NULL;
    if (n && pairs) {
        ranges = malloc(n * sizeof *ranges);
        if (!ranges) {
            state = GPCK_FRAMEWORK_FAILED;
            why = "the shim had no memory for the hook's ranges";
            n = 0;
        } else {
            for (uint32_t i = 0; i < n; i++)
                ranges[i] = (struct gpck_free_range){ .addr = pairs[2 * i], .size = pairs[2 * i + 1] };
            qsort(ranges, n, sizeof *ranges, by_size_desc);
        }
    } else {
        n = 0;
    }
    pthread_mutex_lock(&lock);
    if (id != asked_id || answered_id == id) {
        pthread_mutex_unlock(&lock);
        free(ranges);
        return -ESTALE;
    }
    free(answer_ranges);
    answer_ranges = ranges;
    answer_count = n;
    answer_state = state;
    copy_text(answer_framework, sizeof answer_framework, framework);
    copy_text(answer_why, sizeof answer_why, why);
    answered_id = id;
    pthread_cond_broadcast(&answered);
    pthread_mutex_unlock(&lock);
    return 0;
}

void gp_framework_ask(uint32_t timeout_ms, uint32_t *state, char framework[32], char why[GPCK_NAME_LEN],
                      struct gpck_free_range *ranges, uint32_t max, uint32_t *count)
{
    *count = 0;
    framework[0] = why[0] = '\0';
    pthread_mutex_lock(&lock);
    if (!hooked) {
        pthread_mutex_unlock(&lock);
        *state = GPCK_FRAMEWORK_NO_HOOK;
        return;
    }
    uint64_t id = ++asked_id;
    pthread_cond_broadcast(&asked);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    int rc = 0;
    while (answered_id != id && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&answered, &lock, &until);
    if (answered_id != id) {
        bool took = taken_id == id;
        /* Given up: whatever the hook does next waits at the gate like any thread. */
        gp_gate_exempt_end(hook_slot);
        hook_slot = NULL;
        pthread_mutex_unlock(&lock);
        *state = GPCK_FRAMEWORK_FAILED;
        snprintf(why, GPCK_NAME_LEN, "its hook %s in %u ms (a thread paused in CUDA may hold what it needs)",
                 took ? "did not finish" : "was busy and did not answer", timeout_ms);
        return;
    }
    *state = answer_state;
    copy_text(framework, 32, answer_framework);
    copy_text(why, GPCK_NAME_LEN, answer_why);
    uint32_t n = answer_count < max ? answer_count : max;
    if (answer_state == GPCK_FRAMEWORK_RANGES)
        memcpy(ranges, answer_ranges, n * sizeof *ranges);
    else
        n = 0;
    *count = n;
    free(answer_ranges);
    answer_ranges = NULL;
    answer_count = 0;
    pthread_mutex_unlock(&lock);
}
