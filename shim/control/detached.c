/* See detached.h. */
#include "detached.h"

#include <pthread.h>

bool gp_run_detached(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0)
        return false;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    bool started = pthread_create(&t, &attr, fn, arg) == 0;
    pthread_attr_destroy(&attr);
    return started;
}
