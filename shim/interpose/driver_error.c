#define _GNU_SOURCE
#include "driver_error.h"

#include <pthread.h>
#include <stdio.h>

#include "real_driver.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const char *failed_call; /* string literals: no copy needed */
static CUresult failed_result;
static char failed_text[256];

void gp_driver_error_clear(void)
{
    pthread_mutex_lock(&lock);
    failed_call = NULL;
    failed_text[0] = 0;
    pthread_mutex_unlock(&lock);
}

void gp_failure_note(const char *text)
{
    pthread_mutex_lock(&lock);
    if (!failed_call && !failed_text[0])
        snprintf(failed_text, sizeof(failed_text), "%s", text);
    pthread_mutex_unlock(&lock);
}

CUresult gp_driver_error_note(const char *call, CUresult r)
{
    if (r == CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&lock);
    if (!failed_call && !failed_text[0]) {
        failed_call = call;
        failed_result = r;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

size_t gp_driver_error_text(char *buf, size_t len)
{
    pthread_mutex_lock(&lock);
    const char *call = failed_call;
    CUresult r = failed_result;
    int text = !call && failed_text[0] && len ? snprintf(buf, len, "%s", failed_text) : 0;
    pthread_mutex_unlock(&lock);
    if (text)
        return (size_t)text < len ? (size_t)text : len - 1;
    if (!call || !len)
        return 0;
    const char *name = NULL;
    if (!GP_HAS_REAL(cuGetErrorName) || GP_REAL(cuGetErrorName)(r, &name) != CUDA_SUCCESS || !name)
        name = "CUDA_ERROR_UNKNOWN";
    int n = snprintf(buf, len, "%s returned %s (%d)", call, name, (int)r);
    return n < 0 ? 0 : (size_t)n < len ? (size_t)n : len - 1;
}
