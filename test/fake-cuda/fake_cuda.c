/* Core of the fake CUDA driver: configuration from the environment, the call
 * prologue every entry point runs (trace line, fault injection, init check),
 * the table lock, cuInit, cuDriverGetVersion and the error strings.
 *
 * Environment (read once, at the first call of any cu* function):
 *   FAKE_CUDA_DEVICES=N        devices, 1..8 (default 1)
 *   FAKE_CUDA_MEM_MB=N         memory per device in MiB (default 1024)
 *   FAKE_CUDA_NO_DEVICE=1      cuInit fails with CUDA_ERROR_NO_DEVICE
 *   FAKE_CUDA_SYNC_DELAY_MS=N  cuStreamSynchronize / cuCtxSynchronize sleep N ms
 *   FAKE_CUDA_INIT_DELAY_MS=N  the first cuInit sleeps N ms (the real driver's
 *                              start with no process on the GPU)
 *   FAKE_CUDA_FAIL=f:n[=e],... the n-th call (1-based) of exported function f
 *                              returns CUresult e (default CUDA_ERROR_UNKNOWN),
 *                              without side effects
 *   FAKE_CUDA_TRACE=path       append "name\n" to path for every call, and
 *                              "primary context made on device N" when a
 *                              device's primary context becomes active
 *   FAKE_CUDA_CKPT_DIR=dir     state files of cuCheckpointProcess* (fake_ckpt.c)
 *   FAKE_CUDA_CKPT_BLOCK=1     calls wait while this process is LOCKED or
 *                              CHECKPOINTED (fake_ckpt.c)
 *   FAKE_CUDA_DRIVER_COPY_MB=N a checkpoint of this process maps N MiB
 *                              for the driver's copy of the device state,
 *                              checked at the restore (fake_ckpt.c)
 */
#include "fake_internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FAIL_MAX 64
#define FAIL_NAME_MAX 64

struct fail_entry {
    char name[FAIL_NAME_MAX];
    unsigned long nth;
    CUresult result;
};

static struct fake_config g_config;
static struct fail_entry g_fail[FAIL_MAX];
static int g_nfail;
static int g_trace_fd = -1;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_initialized;
static atomic_ullong g_next_id;

/* ---- configuration ------------------------------------------------------- */

/* 0 and *out on a clean decimal number, -EINVAL otherwise. */
static int parse_ulong(const char *s, unsigned long *out)
{
    if (!s || !*s)
        return -EINVAL;
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || s[0] == '-')
        return -EINVAL;
    *out = v;
    return 0;
}

static void parse_fail_spec(const char *spec)
{
    char *copy = strdup(spec);
    if (!copy)
        return;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        unsigned long result = CUDA_ERROR_UNKNOWN;
        char *eq = strchr(tok, '=');
        if (eq)
            *eq = '\0';
        char *colon = strrchr(tok, ':');
        unsigned long nth;
        if (!colon || colon == tok || (size_t)(colon - tok) >= FAIL_NAME_MAX ||
            parse_ulong(colon + 1, &nth) || nth == 0 || (eq && (parse_ulong(eq + 1, &result) || !result)) ||
            g_nfail == FAIL_MAX) {
            fprintf(stderr, "fake-cuda: ignoring FAKE_CUDA_FAIL entry '%s'\n", tok);
            continue;
        }
        *colon = '\0';
        if (!fake_proc_is_exported(tok))
            fprintf(stderr, "fake-cuda: FAKE_CUDA_FAIL names '%s', which this fake does not export\n",
                    tok);
        snprintf(g_fail[g_nfail].name, FAIL_NAME_MAX, "%s", tok);
        g_fail[g_nfail].nth = nth;
        g_fail[g_nfail].result = (CUresult)result;
        g_nfail++;
    }
    free(copy);
}

/* A child of fork() must not inherit the lock held by a thread that does
 * not exist in it. */
static void atfork_prepare(void) { pthread_mutex_lock(&g_lock); }
static void atfork_release(void) { pthread_mutex_unlock(&g_lock); }

static void load_config(void)
{
    unsigned long v;

    g_config.ndev = 1;
    if (parse_ulong(getenv("FAKE_CUDA_DEVICES"), &v) == 0)
        g_config.ndev = v > FAKE_MAX_DEVICES ? FAKE_MAX_DEVICES : (int)v;

    g_config.mem_bytes = (uint64_t)1024 << 20;
    if (parse_ulong(getenv("FAKE_CUDA_MEM_MB"), &v) == 0)
        g_config.mem_bytes = (uint64_t)v << 20;

    const char *nd = getenv("FAKE_CUDA_NO_DEVICE");
    g_config.no_device = nd && *nd && strcmp(nd, "0") != 0;

    if (parse_ulong(getenv("FAKE_CUDA_SYNC_DELAY_MS"), &v) == 0)
        g_config.sync_delay_ms = (unsigned)v;
    if (parse_ulong(getenv("FAKE_CUDA_INIT_DELAY_MS"), &v) == 0)
        g_config.init_delay_ms = (unsigned)v;

    const char *cb = getenv("FAKE_CUDA_CKPT_BLOCK");
    g_config.ckpt_block = cb && *cb && strcmp(cb, "0") != 0;

    const char *dm = getenv("FAKE_CUDA_DIRTY_MEMORY");
    g_config.dirty_memory = dm && *dm && strcmp(dm, "0") != 0;

    if (parse_ulong(getenv("FAKE_CUDA_DRIVER_COPY_MB"), &v) == 0)
        g_config.driver_copy_mb = (unsigned)v;

    const char *cd = getenv("FAKE_CUDA_CKPT_DIR");
    int n;
    if (cd && *cd)
        n = snprintf(g_config.ckpt_dir, sizeof(g_config.ckpt_dir), "%s", cd);
    else
        n = snprintf(g_config.ckpt_dir, sizeof(g_config.ckpt_dir), "/tmp/fake-cuda-ckpt-%u",
                     (unsigned)getuid());
    if (n < 0 || (size_t)n >= sizeof(g_config.ckpt_dir)) {
        fprintf(stderr, "fake-cuda: FAKE_CUDA_CKPT_DIR is too long; checkpoint calls will fail\n");
        g_config.ckpt_dir[0] = '\0';
    }

    const char *fail = getenv("FAKE_CUDA_FAIL");
    if (fail && *fail)
        parse_fail_spec(fail);

    const char *trace = getenv("FAKE_CUDA_TRACE");
    if (trace && *trace) {
        /* "%p" in the path: a file per process (a job's launcher and ranks share the setting) */
        char path[4096];
        const char *p = strstr(trace, "%p");
        if (p)
            snprintf(path, sizeof path, "%.*s%d%s", (int)(p - trace), trace, (int)getpid(), p + 2);
        else
            snprintf(path, sizeof path, "%s", trace);
        g_trace_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (g_trace_fd < 0)
            fprintf(stderr, "fake-cuda: cannot open FAKE_CUDA_TRACE %s\n", trace);
    }

    pthread_atfork(atfork_prepare, atfork_release, atfork_release);
}

const struct fake_config *fake_config(void)
{
    pthread_once(&g_once, load_config);
    return &g_config;
}

/* ---- prologue ------------------------------------------------------------ */

static void trace_call(const char *name);

void fake_trace(const char *line)
{
    if (g_trace_fd >= 0)
        trace_call(line);
}

static void trace_call(const char *name)
{
    char line[128];
    size_t len = strlen(name);
    if (len > sizeof(line) - 1)
        len = sizeof(line) - 1;
    memcpy(line, name, len);
    line[len] = '\n';
    /* One write per line: O_APPEND keeps lines from several threads and
     * processes whole. */
    ssize_t r = write(g_trace_fd, line, len + 1);
    (void)r;
}

/* The result the nth call of name is to fail with, or CUDA_SUCCESS. */
static CUresult injected_failure(const char *name, unsigned long nth)
{
    for (int i = 0; i < g_nfail; i++)
        if (g_fail[i].nth == nth && strcmp(g_fail[i].name, name) == 0)
            return g_fail[i].result;
    return CUDA_SUCCESS;
}

CUresult fake_enter(const char *name, unsigned long nth, int flags)
{
    const struct fake_config *c = fake_config();
    if (g_trace_fd >= 0)
        trace_call(name);
    if ((flags & FAKE_F_WAIT) && c->ckpt_block)
        fake_ckpt_wait();
    CUresult injected = g_nfail ? injected_failure(name, nth) : CUDA_SUCCESS;
    if (injected != CUDA_SUCCESS)
        return injected;
    if ((flags & FAKE_F_INIT) && !atomic_load(&g_initialized))
        return CUDA_ERROR_NOT_INITIALIZED;
    return CUDA_SUCCESS;
}

void fake_sync_delay(void)
{
    unsigned ms = fake_config()->sync_delay_ms;
    if (!ms)
        return;
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

void fake_lock(void) { pthread_mutex_lock(&g_lock); }
void fake_unlock(void) { pthread_mutex_unlock(&g_lock); }

unsigned long long fake_next_id(void)
{
    return atomic_fetch_add(&g_next_id, 1) + 1;
}

/* ---- initialization and version ------------------------------------------ */

FAKE_EXPORT CUresult cuInit(unsigned int Flags)
{
    FAKE_ENTER_NOINIT();
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    const struct fake_config *c = fake_config();
    if (c->no_device || c->ndev == 0)
        return CUDA_ERROR_NO_DEVICE;
    if (!atomic_exchange(&g_initialized, 1)) {
        if (c->init_delay_ms)
            usleep(c->init_delay_ms * 1000u);
        if (c->driver_copy_mb)
            fake_ckpt_copier_start();
    }
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuInit)

FAKE_EXPORT CUresult cuDriverGetVersion(int *driverVersion)
{
    FAKE_ENTER_NOINIT();
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = FAKE_DRIVER_VERSION;
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuDriverGetVersion)

/* ---- error strings --------------------------------------------------------- */

#define ERR(code, text) { code, #code, text }
static const struct {
    CUresult code;
    const char *name;
    const char *text;
} g_errors[] = {
    ERR(CUDA_SUCCESS, "no error"),
    ERR(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    ERR(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    ERR(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
    ERR(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
    ERR(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
    ERR(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
    ERR(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    ERR(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
    ERR(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
    ERR(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current"),
    ERR(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed"),
    ERR(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed"),
    ERR(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
    ERR(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
    ERR(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "context already in use"),
    ERR(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS"),
    ERR(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    ERR(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
    ERR(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    ERR(CUDA_ERROR_NOT_READY, "device not ready"),
    ERR(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
    ERR(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
    ERR(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "primary context active"),
    ERR(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
    ERR(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
        "part or all of the requested memory range is already mapped"),
    ERR(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
        "pointer does not correspond to a registered memory region"),
    ERR(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
    ERR(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    ERR(CUDA_ERROR_TIMEOUT, "wait operation timed out"),
    ERR(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef ERR

static int find_error(CUresult error)
{
    for (size_t i = 0; i < sizeof(g_errors) / sizeof(g_errors[0]); i++)
        if (g_errors[i].code == error)
            return (int)i;
    return -ENOENT;
}

/* Like the real driver: an unknown code gives NULL and CUDA_ERROR_INVALID_VALUE. */
FAKE_EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    FAKE_ENTER_NOINIT();
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    int i = find_error(error);
    *pStr = i >= 0 ? g_errors[i].text : NULL;
    return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
FAKE_LOCAL_ALIAS(cuGetErrorString)

FAKE_EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    FAKE_ENTER_NOINIT();
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    int i = find_error(error);
    *pStr = i >= 0 ? g_errors[i].name : NULL;
    return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
FAKE_LOCAL_ALIAS(cuGetErrorName)
