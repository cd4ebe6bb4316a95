/* The snapshots a holder keeps (snapshot_holder.c says why), and the
 * HOLD_* messages that put, list, take and drop them. One thread. */
#ifndef GPUCKPT_HOLDER_SNAPSHOTS_H
#define GPUCKPT_HOLDER_SNAPSHOTS_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* One request and its reply. */
struct request {
    int client;      /* the connection it came on */
    uint16_t type;
    const void *payload;
    uint32_t len;
    int *fds;        /* brought with it; a handler that keeps them sets nfds 0 */
    uint32_t nfds;
    void *reply;
    uint32_t reply_len;
    const int *send; /* fds the reply passes (still the store's) */
    uint32_t nsend;
};

/* 0 or -errno; the reply's payload and fds set. */
int holder_handle(struct request *r);
/* What the connection that ended was still handing over goes. */
void holder_drop_unfinished(int client);
/* Snapshots of processes that ended (or whose PID names another now) go. */
void holder_watch_processes(void);
/* Every snapshot goes, for why. */
void holder_drop_all(const char *why);
bool holder_holds_any(void);
uint64_t holder_now_ms(clockid_t clock);

#endif
