/*
 * Fake libnvidia-ml.so.1 (tests only): the handful of NVML calls the
 * controller makes, for FAKE_CUDA_DEVICES fake GPUs with the fake libcuda's
 * UUIDs ('F','A','K','E',N,0...).
 *
 *   FAKE_NVML_FREE_MIB=a,b,...  free memory of device 0, 1, ... (default 81920)
 *   FAKE_NVML_PROCESS_PID=P and FAKE_NVML_PROCESS_MIB=N
 *                               process P holds N MiB on device 0
 *                               (default: NVML lists no process)
 *   FAKE_NVML_ABSENT=1          nvmlInit_v2 fails, as without a driver
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAKE_EXPORT __attribute__((visibility("default")))
#define TOTAL_MIB 81920ull
#define MIB (1ull << 20)

typedef struct {
    unsigned long long total, free, used;
} nvml_memory;

typedef struct {
    unsigned int pid;
    unsigned long long used;
    unsigned int gpu_instance, compute_instance;
} nvml_process;

static unsigned device_count(void)
{
    const char *s = getenv("FAKE_CUDA_DEVICES");
    int n = s ? atoi(s) : 1;
    return n > 0 && n <= 16 ? (unsigned)n : 1;
}

/* Handles are the ordinal + 1, so that none is NULL. */
static long ordinal(void *dev)
{
    long i = (long)(size_t)dev - 1;
    return i >= 0 && (unsigned long)i < device_count() ? i : -1;
}

static unsigned long long free_mib(long dev)
{
    const char *s = getenv("FAKE_NVML_FREE_MIB");
    for (long i = 0; s && *s; i++) {
        char *end;
        unsigned long long v = strtoull(s, &end, 10);
        if (i == dev)
            return v;
        s = *end == ',' ? end + 1 : end + strlen(end);
    }
    return TOTAL_MIB;
}

FAKE_EXPORT int nvmlInit_v2(void)
{
    const char *absent = getenv("FAKE_NVML_ABSENT");
    return absent && *absent == '1' ? 9 /* NVML_ERROR_DRIVER_NOT_LOADED */ : 0;
}

FAKE_EXPORT int nvmlShutdown(void) { return 0; }

FAKE_EXPORT int nvmlDeviceGetCount_v2(unsigned *count)
{
    *count = device_count();
    return 0;
}

FAKE_EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **dev)
{
    if (index >= device_count())
        return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *dev = (void *)(size_t)(index + 1);
    return 0;
}

FAKE_EXPORT int nvmlDeviceGetUUID(void *dev, char *uuid, unsigned len)
{
    long i = ordinal(dev);
    if (i < 0)
        return 2;
    /* The fake libcuda's UUID bytes: 46 41 4b 45 NN 00 ... */
    snprintf(uuid, len, "GPU-46414b45-%02lx00-0000-0000-000000000000", i);
    return 0;
}

FAKE_EXPORT int nvmlDeviceGetMemoryInfo(void *dev, nvml_memory *m)
{
    long i = ordinal(dev);
    if (i < 0)
        return 2;
    unsigned long long f = free_mib(i);
    m->total = TOTAL_MIB * MIB;
    m->free = (f < TOTAL_MIB ? f : TOTAL_MIB) * MIB;
    m->used = m->total - m->free;
    return 0;
}

FAKE_EXPORT int nvmlDeviceGetComputeRunningProcesses_v3(void *dev, unsigned *count, nvml_process *out)
{
    long i = ordinal(dev);
    if (i < 0)
        return 2;
    const char *mib = getenv("FAKE_NVML_PROCESS_MIB");
    const char *pid = getenv("FAKE_NVML_PROCESS_PID");
    if (i != 0 || !mib || !pid) {
        *count = 0;
        return 0;
    }
    if (*count < 1) {
        *count = 1;
        return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    }
    out[0] = (nvml_process){ .pid = (unsigned)atoi(pid), .used = strtoull(mib, NULL, 10) * MIB };
    *count = 1;
    return 0;
}
