/* Streams, events and kernel launches.
 *
 * All work in this fake completes before the call that issued it returns,
 * so streams and events are bookkeeping: they exist so handles can be
 * checked (a destroyed stream is CUDA_ERROR_INVALID_HANDLE, as on a GPU).
 * Stream and context synchronize can be slowed down with
 * FAKE_CUDA_SYNC_DELAY_MS, so a test can prove a gate waits for calls in
 * flight.
 *
 * A kernel is a host function: test programs cast
 *     void fn(void **kernelParams)
 * to CUfunction and cuLaunchKernel calls it once, on the calling thread.
 */
#include "fake_internal.h"

#include <stdlib.h>

struct fake_stream {
    struct fake_ctx *ctx;
    unsigned flags;
    int priority;
};

struct fake_event {
    unsigned flags;
    int recorded;
};

static struct fake_rangeset g_streams; /* registry of struct fake_stream */
static struct fake_rangeset g_events;  /* registry of struct fake_event */

typedef void (*fake_kernel_fn)(void **kernelParams);

static int is_default_stream(CUstream s)
{
    return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

CUresult fake_stream_check(CUstream s)
{
    if (is_default_stream(s)) {
        struct fake_ctx *ctx;
        return fake_ctx_current(&ctx);
    }
    fake_lock();
    int ok = fake_reg_has(&g_streams, s);
    fake_unlock();
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* ---- streams ------------------------------------------------------------------- */

static CUresult stream_create(CUstream *phStream, unsigned int Flags, int priority)
{
    if (!phStream || (Flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_ctx *ctx;
    CUresult r = fake_ctx_current(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct fake_stream *s = calloc(1, sizeof(*s));
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *s = (struct fake_stream){ .ctx = ctx, .flags = Flags, .priority = priority };
    fake_lock();
    int err = fake_reg_add(&g_streams, s);
    fake_unlock();
    if (err) {
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phStream = (CUstream)s;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    FAKE_ENTER();
    return stream_create(phStream, Flags, 0);
}
FAKE_LOCAL_ALIAS(cuStreamCreate)

FAKE_EXPORT CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    FAKE_ENTER();
    return stream_create(phStream, flags, priority);
}
FAKE_LOCAL_ALIAS(cuStreamCreateWithPriority)

static CUresult stream_destroy(CUstream hStream)
{
    fake_lock();
    int ok = !is_default_stream(hStream) && fake_reg_has(&g_streams, hStream);
    if (ok)
        fake_reg_del(&g_streams, hStream);
    fake_unlock();
    if (!ok)
        return CUDA_ERROR_INVALID_HANDLE;
    free(hStream);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamDestroy(CUstream hStream)
{
    FAKE_ENTER();
    return stream_destroy(hStream);
}
FAKE_LOCAL_ALIAS(cuStreamDestroy)

FAKE_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream)
{
    FAKE_ENTER();
    return stream_destroy(hStream);
}
FAKE_LOCAL_ALIAS(cuStreamDestroy_v2)

static CUresult stream_sync(CUstream hStream)
{
    CUresult r = fake_stream_check(hStream);
    if (r == CUDA_SUCCESS)
        fake_sync_delay();
    return r;
}

FAKE_EXPORT CUresult cuStreamSynchronize(CUstream hStream)
{
    FAKE_ENTER();
    return stream_sync(hStream);
}
FAKE_LOCAL_ALIAS(cuStreamSynchronize)

FAKE_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
    FAKE_ENTER();
    return stream_sync(hStream);
}
FAKE_LOCAL_ALIAS(cuStreamSynchronize_ptsz)

/* Always idle: everything completed when it was issued. */
FAKE_EXPORT CUresult cuStreamQuery(CUstream hStream)
{
    FAKE_ENTER();
    return fake_stream_check(hStream);
}
FAKE_LOCAL_ALIAS(cuStreamQuery)

FAKE_EXPORT CUresult cuStreamQuery_ptsz(CUstream hStream)
{
    FAKE_ENTER();
    return fake_stream_check(hStream);
}
FAKE_LOCAL_ALIAS(cuStreamQuery_ptsz)

/* ---- events -------------------------------------------------------------------- */

/* The event, or NULL when hEvent is not a live event. Lock held. */
static struct fake_event *event_get_locked(CUevent hEvent)
{
    return fake_reg_has(&g_events, hEvent) ? (struct fake_event *)hEvent : NULL;
}

FAKE_EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    FAKE_ENTER();
    const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if (!phEvent || (Flags & ~known) ||
        ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)))
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_ctx *ctx;
    CUresult r = fake_ctx_current(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct fake_event *e = calloc(1, sizeof(*e));
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->flags = Flags;
    fake_lock();
    int err = fake_reg_add(&g_events, e);
    fake_unlock();
    if (err) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phEvent = (CUevent)e;
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuEventCreate)

static CUresult event_record(CUevent hEvent, CUstream hStream)
{
    CUresult r = fake_stream_check(hStream);
    if (r != CUDA_SUCCESS)
        return r;
    fake_lock();
    struct fake_event *e = event_get_locked(hEvent);
    if (e)
        e->recorded = 1;
    fake_unlock();
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

FAKE_EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
    FAKE_ENTER();
    return event_record(hEvent, hStream);
}
FAKE_LOCAL_ALIAS(cuEventRecord)

FAKE_EXPORT CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    FAKE_ENTER();
    return event_record(hEvent, hStream);
}
FAKE_LOCAL_ALIAS(cuEventRecord_ptsz)

static CUresult event_check(CUevent hEvent)
{
    fake_lock();
    struct fake_event *e = event_get_locked(hEvent);
    fake_unlock();
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

FAKE_EXPORT CUresult cuEventSynchronize(CUevent hEvent)
{
    FAKE_ENTER();
    return event_check(hEvent);
}
FAKE_LOCAL_ALIAS(cuEventSynchronize)

FAKE_EXPORT CUresult cuEventQuery(CUevent hEvent)
{
    FAKE_ENTER();
    return event_check(hEvent);
}
FAKE_LOCAL_ALIAS(cuEventQuery)

static CUresult event_destroy(CUevent hEvent)
{
    fake_lock();
    struct fake_event *e = event_get_locked(hEvent);
    if (e)
        fake_reg_del(&g_events, e);
    fake_unlock();
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    free(e);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventDestroy(CUevent hEvent)
{
    FAKE_ENTER();
    return event_destroy(hEvent);
}
FAKE_LOCAL_ALIAS(cuEventDestroy)

FAKE_EXPORT CUresult cuEventDestroy_v2(CUevent hEvent)
{
    FAKE_ENTER();
    return event_destroy(hEvent);
}
FAKE_LOCAL_ALIAS(cuEventDestroy_v2)

/* Always 0 ms. Both events must exist, allow timing and have been recorded. */
static CUresult event_elapsed(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    if (!pMilliseconds)
        return CUDA_ERROR_INVALID_VALUE;
    fake_lock();
    struct fake_event *s = event_get_locked(hStart), *e = event_get_locked(hEnd);
    int ok = s && e && s->recorded && e->recorded &&
             !((s->flags | e->flags) & CU_EVENT_DISABLE_TIMING);
    fake_unlock();
    if (!ok)
        return CUDA_ERROR_INVALID_HANDLE;
    *pMilliseconds = 0.0f;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    FAKE_ENTER();
    return event_elapsed(pMilliseconds, hStart, hEnd);
}
FAKE_LOCAL_ALIAS(cuEventElapsedTime)

FAKE_EXPORT CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    FAKE_ENTER();
    return event_elapsed(pMilliseconds, hStart, hEnd);
}
FAKE_LOCAL_ALIAS(cuEventElapsedTime_v2)

/* ---- launches ------------------------------------------------------------------ */

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, CUstream hStream, void **kernelParams, void **extra)
{
    struct fake_ctx *ctx;
    CUresult r = fake_ctx_current(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!gx || !gy || !gz || !bx || !by || !bz || (kernelParams && extra))
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = fake_stream_check(hStream)) != CUDA_SUCCESS)
        return r;
    /* A union, because ISO C has no cast from object to function pointer. */
    union {
        CUfunction f;
        fake_kernel_fn fn;
    } u = { .f = f };
    u.fn(kernelParams);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                    unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                    unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                    void **kernelParams, void **extra)
{
    FAKE_ENTER();
    (void)sharedMemBytes;
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams,
                  extra);
}
FAKE_LOCAL_ALIAS(cuLaunchKernel)

FAKE_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                         unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                         unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                         void **kernelParams, void **extra)
{
    FAKE_ENTER();
    (void)sharedMemBytes;
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams,
                  extra);
}
FAKE_LOCAL_ALIAS(cuLaunchKernel_ptsz)

static CUresult host_func(CUstream hStream, CUhostFn fn, void *userData)
{
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fake_stream_check(hStream);
    if (r == CUDA_SUCCESS)
        fn(userData);
    return r;
}

FAKE_EXPORT CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
    FAKE_ENTER();
    return host_func(hStream, fn, userData);
}
FAKE_LOCAL_ALIAS(cuLaunchHostFunc)

FAKE_EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData)
{
    FAKE_ENTER();
    return host_func(hStream, fn, userData);
}
FAKE_LOCAL_ALIAS(cuLaunchHostFunc_ptsz)
