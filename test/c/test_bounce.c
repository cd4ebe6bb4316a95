/* The bounce ring (shim/control/bounce.c) against the fake libcuda: bytes land
 * where they belong in both directions, across spans of odd lengths, empty
 * spans, spans longer than the ring and many short spans that share slots,
 * with a call per span (a driver without batch copies) and a batch per
 * slot; a failing DMA, a failing wait, a failing DMA back, a failing event
 * record and a failing batch each end the copy with -EIO instead of
 * hanging, and a driver that cannot batch gets a call per span. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bounce.h"
#include "fake_driver.h"
#include "harness.h"

void *gp_real[GP_IDX_COUNT];

typedef CUresult (*pfn_alloc)(CUdeviceptr *, size_t);
typedef CUresult (*pfn_stream)(CUstream *, unsigned);
typedef CUresult (*pfn_h2d)(CUdeviceptr, const void *, size_t);
typedef CUresult (*pfn_d2h)(void *, CUdeviceptr, size_t);


#define MIB (1ull << 20)
/* Odd lengths, an empty span, and more than one ring's worth on a 2-core
 * machine (4 slots of 8 MiB): 7 pieces (DMAs) in 5 slots (events). */
static const uint64_t LENS[] = { 9 * MIB + 5, 0, 25 * MIB + 4095, 1 * MIB };
enum { NSPANS = sizeof(LENS) / sizeof(LENS[0]) };

static struct gp_bounce *ring;
static CUstream stream;
static CUdeviceptr dev;
static uint8_t *host, *pattern;
static uint64_t total;
static struct gp_bounce_span spans[NSPANS];

static void setup(void)
{
    /* The fake reads this at its first call. Until use_batches, the ring
     * has no batch copy (an older driver): each DMA is called 7 times
     * by the first test, so the 9th is the second (and third) test's 2nd;
     * each queued slot is waited for once: 5 waits a whole copy, 22
     * before the fourth test, and records as many. */
    setenv("FAKE_CUDA_FAIL",
           "cuMemcpyDtoHAsync_v2:9,cuMemcpyHtoDAsync_v2:9,cuEventSynchronize:40,cuEventRecord:60,"
           "cuMemcpyBatchAsync_v2:12,cuMemcpyBatchAsync_v2:18=801",
           1);
    static const struct { int idx; const char *name; } table[] = {
        { GP_IDX_cuEventCreate, "cuEventCreate" },
        { GP_IDX_cuEventRecord, "cuEventRecord" },
        { GP_IDX_cuEventSynchronize, "cuEventSynchronize" },
        { GP_IDX_cuEventDestroy_v2, "cuEventDestroy_v2" },
        { GP_IDX_cuMemcpyDtoHAsync_v2, "cuMemcpyDtoHAsync_v2" },
        { GP_IDX_cuMemcpyHtoDAsync_v2, "cuMemcpyHtoDAsync_v2" },
        { GP_IDX_cuMemHostRegister_v2, "cuMemHostRegister_v2" },
        { GP_IDX_cuMemHostUnregister, "cuMemHostUnregister" },
        { GP_IDX_cuStreamSynchronize, "cuStreamSynchronize" },
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        gp_real[table[i].idx] = fn(table[i].name);
    CUresult cu;
    if (((pfn_init)fn("cuInit"))(0) || gp_contexts_use_primary(0, &cu)) {
        fprintf(stderr, "test_bounce: the fake driver did not start\n");
        exit(2);
    }
    for (int i = 0; i < NSPANS; i++)
        total += LENS[i];
    host = malloc(total);
    pattern = malloc(total);
    if (!host || !pattern || ((pfn_alloc)fn("cuMemAlloc_v2"))(&dev, total) ||
        ((pfn_stream)fn("cuStreamCreate"))(&stream, CU_STREAM_NON_BLOCKING)) {
        fprintf(stderr, "test_bounce: no memory\n");
        exit(2);
    }
    for (uint64_t i = 0; i < total; i++)
        pattern[i] = (uint8_t)(i * 2654435761u >> 13);
    uint64_t off = 0;
    for (int i = 0; i < NSPANS; i++) {
        /* Host offsets run backwards, so a piece put at its device offset would be caught. */
        uint64_t host_off = total - off - LENS[i];
        spans[i] = (struct gp_bounce_span){ .device = 0, .stream = stream, .dev = dev + off, .host = host + host_off,
                                            .len = LENS[i] };
        off += LENS[i];
    }
}

static void device_holds(const uint8_t *bytes)
{
    ((pfn_h2d)fn("cuMemcpyHtoD_v2"))(dev, bytes, total);
}

static bool host_matches(const uint8_t *want)
{
    for (int i = 0; i < NSPANS; i++)
        if (memcmp(spans[i].host, want + (spans[i].dev - dev), LENS[i]))
            return false;
    return true;
}

/* A whole copy out lands every byte where it belongs (after a failure: the ring works again). */
static void copies_out_whole(void)
{
    memset(host, 0, total);
    CHECK(gp_bounce_copy(ring, true, spans, NSPANS) == 0);
    CHECK(host_matches(pattern));
}

static void test_out_then_in(void)
{
    CHECK(gp_bounce_create(0, &ring) == 0);
    device_holds(pattern);
    copies_out_whole();

    uint8_t *back = malloc(total);
    memset(back, 0, total);
    device_holds(back);
    CHECK(gp_bounce_copy(ring, false, spans, NSPANS) == 0);
    ((pfn_d2h)fn("cuMemcpyDtoH_v2"))(back, dev, total);
    CHECK(memcmp(back, pattern, total) == 0);
    free(back);
}

static void test_failing_dma_out_ends_the_copy(void)
{
    CHECK(gp_bounce_copy(ring, true, spans, NSPANS) == -EIO);
    copies_out_whole();
}

static void test_failing_dma_in_ends_the_copy(void)
{
    /* HtoD calls so far: 7; the 9th is this copy's 2nd. */
    CHECK(gp_bounce_copy(ring, false, spans, NSPANS) == -EIO);
    CHECK(gp_bounce_copy(ring, false, spans, NSPANS) == 0);
}

static void test_failing_wait_ends_the_copy(void)
{
    /* Event waits so far: 10 + 1 + 5 + 1 + 5; the 40th is in this test's fourth copy. */
    int failed = 0;
    for (int i = 0; i < 4 && !failed; i++)
        failed = gp_bounce_copy(ring, i % 2 == 0, spans, NSPANS) == -EIO;
    CHECK(failed);
}

/* A DMA queued without its event: the copy fails, the stream is drained,
 * and the ring copies correctly afterwards. */
static void test_failing_event_record_ends_the_copy(void)
{
    int failed = 0;
    for (int i = 0; i < 6 && !failed; i++)
        failed = gp_bounce_copy(ring, true, spans, NSPANS) == -EIO;
    CHECK(failed);
    copies_out_whole();
    gp_bounce_destroy(ring);
    ring = NULL;
}

/* From here on the driver has the batch copy: one call per slot. */
static void use_batches(void)
{
    gp_real[GP_IDX_cuMemcpyBatchAsync_v2] = fn("cuMemcpyBatchAsync_v2");
}

static void test_batches_out_then_in(void)
{
    use_batches();
    test_out_then_in(); /* batch calls 1-5 out, 6-10 in: one per slot */
}

/* A failing batch ends the copy like a failing DMA; the ring works again. */
static void test_failing_batch_ends_the_copy(void)
{
    CHECK(gp_bounce_copy(ring, true, spans, NSPANS) == -EIO); /* batch call 12 fails */
    copies_out_whole();
}

/* A driver that cannot batch (call 18: CUDA_ERROR_NOT_SUPPORTED) gets a
 * call per part, and the bytes still land where they belong. */
static void test_driver_without_batches(void)
{
    copies_out_whole();
    gp_bounce_destroy(ring);
    ring = NULL;
}

/* A pool copied without its zero blocks: hundreds of short spans, with
 * gaps between them on the device, packed several to a slot; the bytes of
 * the gaps are never touched. */
static void test_many_short_spans(void)
{
    enum { N = 300 };
    static struct gp_bounce_span many[N];
    const uint64_t gap = 256 * 1024;
    uint64_t dev_off = 0, bytes = 0;
    for (int i = 0; i < N; i++) {
        uint64_t len = 512 * 1024 + (uint64_t)(i % 7) * 4097;
        if (dev_off + len > total)
            break;
        many[i] = (struct gp_bounce_span){ .device = 0, .stream = stream, .dev = dev + dev_off, .len = len };
        dev_off += len + gap;
        bytes += len;
    }
    /* Host places run backwards. */
    uint64_t host_off = bytes;
    int n = 0;
    for (; n < N && many[n].len; n++) {
        host_off -= many[n].len;
        many[n].host = host + host_off;
    }
    CHECK(gp_bounce_create(0, &ring) == 0);
    device_holds(pattern);
    memset(host, 0, total);
    CHECK(gp_bounce_copy(ring, true, many, (uint32_t)n) == 0);
    bool out_ok = true;
    for (int i = 0; i < n; i++)
        out_ok &= memcmp(many[i].host, pattern + (many[i].dev - dev), many[i].len) == 0;
    CHECK(out_ok);

    uint8_t *back = malloc(total);
    memset(back, 0xA5, total);
    device_holds(back);
    CHECK(gp_bounce_copy(ring, false, many, (uint32_t)n) == 0);
    ((pfn_d2h)fn("cuMemcpyDtoH_v2"))(back, dev, total);
    bool in_ok = true;
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        for (; at < many[i].dev - dev; at++) /* a gap: untouched */
            in_ok &= back[at] == 0xA5;
        in_ok &= memcmp(back + at, pattern + at, many[i].len) == 0;
        at += many[i].len;
    }
    CHECK(in_ok);
    free(back);
    gp_bounce_destroy(ring);
    ring = NULL;
}

int main(void)
{
    setup();
    RUN(test_out_then_in);
    RUN(test_failing_dma_out_ends_the_copy);
    RUN(test_failing_dma_in_ends_the_copy);
    RUN(test_failing_wait_ends_the_copy);
    RUN(test_failing_event_record_ends_the_copy);
    RUN(test_batches_out_then_in);
    RUN(test_failing_batch_ends_the_copy);
    RUN(test_driver_without_batches);
    RUN(test_many_short_spans);
    return HARNESS_END();
}
