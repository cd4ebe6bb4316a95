/* Work handed to a thread of its own, so that the control thread (and the
 * application waiting on it) need not wait for it: freeing held staging,
 * closing a migrate's held fds. */
#ifndef GPUCKPT_DETACHED_H
#define GPUCKPT_DETACHED_H

#include <stdbool.h>

/* Runs fn(arg) on a new detached thread. false when no thread could be
 * started: the caller then does the work itself. */
bool gp_run_detached(void *(*fn)(void *), void *arg);

#endif
