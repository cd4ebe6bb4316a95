/* Waking NCCL's UDS service thread when its communicator is destroyed.
 *
 * That thread (one per proxy, NCCL 2.19 and later, where NCCL shares cuMem
 * handles over a Unix socket) sleeps in poll() with a 500 ms timeout and
 * reads its stop flag only once poll returns, so ncclCommDestroy's
 * pthread_join of it waits 0 to 0.5 s: most of a rank's teardown in the cut.
 * While armed, the shim's pthread_join sends an empty datagram to the
 * socket of a thread it is about to join, when that thread sleeps in poll()
 * on one NCCL socket; NCCL set its stop flag before the join, so the thread
 * wakes, sees it and ends. */
#ifndef GPUCKPT_PROXY_WAKE_H
#define GPUCKPT_PROXY_WAKE_H

#include <pthread.h>
#include <stdbool.h>

/* Nests: armed while any caller has it on (the teardown, rebuild.c). */
void gp_proxy_wake_arm(bool on);
/* 1: t slept in poll() on an NCCL socket and was sent the datagram;
 * 0: it does not (running, another call, another socket, or gone). */
int gp_proxy_wake(pthread_t t);

#endif
