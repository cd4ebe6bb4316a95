#define _GNU_SOURCE
#include "handlers.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "../interpose/cuda_api.h" /* before pool.h: see cuda_api.h */
#include "../interpose/contexts.h"
#include "../interpose/driver_error.h"
#include "../interpose/driver_mappings.h"
#include "../interpose/gate.h"
#include "../interpose/log.h"
#include "../interpose/outside.h"
#include "../interpose/real_driver.h"
#include "../interpose/shim.h"
#include "../pool/pool.h"
#include "block_digest.h"
#include "bounce.h"
#include "collective_handlers.h"
#include "driver_zeros.h"
#include "framework_hook.h"
#include "peer_hold.h"
#include "snapshot_copy.h"
#include "spare_memory.h"

static struct gp_client *gate_holder;
static CUstream copy_streams[GPCK_MAX_DEVICES];
/* Clients with a live window open (GPCK_LIVE_WINDOW): while any is, the
 * pool keeps its chunks mapped and cannot be suspended. */
static int live_windows;
/* The client whose GPCK_PEER_MIRROR maps the last hold's memory: the mirror
 * goes when it leaves. */
static struct gp_client *mirror_owner;

/* Suspension outlives the controller that started it: the application stays
 * held, its pool released, until a controller remaps the pool, copies the
 * data back and resumes. A controller lost between remap and resume leaves
 * the pool released again rather than letting the application run on
 * memory whose contents were never restored.
 * A rollback (restore --into) is ROLLING_BACK from its first COPY_IN; cut
 * off before its last one, the application stays held, HALF_RESTORED,
 * until another rollback completes. restore_complete: the current
 * rollback's or resume's last COPY_IN (GPCK_COPY_COMPLETES) succeeded. */
static enum { RUNNING, SUSPENDED, RESTORING, ROLLING_BACK, HALF_RESTORED } suspension = RUNNING;
static bool restore_complete;
static char held_image[GPCK_PATH_LEN];
/* The pool's data itself, when a suspend kept it in staging memory. */
static struct gp_held held_data;

static uint32_t pool_state_now(void)
{
    struct gp_shim_info info;
    gp_shim_info(&info);
    switch (suspension) {
    case SUSPENDED:
    case RESTORING:
        return GPCK_POOL_SUSPENDED;
    case HALF_RESTORED:
        return GPCK_POOL_HALF_RESTORED;
    default:
        return (uint32_t)info.pool_state;
    }
}

bool gp_gate_held(void)
{
    return gate_holder != NULL;
}

/* c holds the gate (closed already); rollback: to write an image back. */
static void take_gate(struct gp_client *c, bool rollback)
{
    gate_holder = c;
    c->holds_gate = true;
    c->rollback = rollback;
}

/* c no longer holds the gate; the gate itself stays as it is. */
static void let_go(struct gp_client *c)
{
    gate_holder = NULL;
    c->holds_gate = false;
    c->rollback = false;
}

/* The pool's data is all in place: reopen the gate, forget any suspension
 * and the memory that held the data. Returns how long the gate was closed. */
static uint64_t run_again(struct gp_client *c)
{
    /* Set again at the remap; only a path that skipped it finds any kept. */
    CUresult cu = CUDA_SUCCESS;
    if (gp_contexts_restore_stacks(&cu))
        GP_WARN("control", "a context's stack limit could not be set again (CUresult %d): it stays at its least", (int)cu);
    uint64_t ns = gp_gate_open();
    let_go(c);
    suspension = RUNNING;
    gp_driver_mappings_watch(false);
    held_image[0] = 0;
    gp_peer_drop();
    if (c->staging.borrowed) /* the held memory, unpinned before it goes */
        gp_staging_release_later(&c->staging, &held_data);
    else
        gp_held_drop(&held_data);
    return ns;
}

static int handle_hello(struct gp_request *r)
{
    struct gpck_hello_rep *rep = r->reply;
    struct gp_shim_info info;
    gp_shim_info(&info);
    const struct gp_config *cfg = gp_shim_config();
    *rep = (struct gpck_hello_rep){
        .version = GPCK_PROTOCOL_VERSION,
        .pid = getpid(),
        .uid = geteuid(),
        .device_count = (uint32_t)info.device_count,
        .pool_state = pool_state_now(),
        .driver_version = (uint32_t)info.driver_version,
        .pool_base = cfg->pool_base,
        .slice_size = cfg->slice_size,
        .quantum = GP_QUANTUM,
        .chunk_size = cfg->chunk_size,
    };
    const struct gpck_hello_req *req = gp_request_payload(r, sizeof(*req));
    if (!req)
        return -EPROTO;
    return req->client_version == GPCK_PROTOCOL_VERSION ? 0 : -EPROTONOSUPPORT;
}

static int handle_status(struct gp_request *r)
{
    struct gpck_status_rep *rep = r->reply;
    struct gp_shim_info info;
    gp_shim_info(&info);
    memset(rep, 0, sizeof(*rep));
    rep->gate_state = gp_gate_is_closed() ? GPCK_GATE_CLOSED : GPCK_GATE_OPEN;
    rep->pool_state = pool_state_now();
    rep->device_count = (uint32_t)info.device_count;
    memcpy(rep->held_image, held_image, sizeof(rep->held_image));
    rep->outside_managed = gp_outside_bytes(GP_OUT_MANAGED);
    rep->outside_stream_ordered = gp_outside_bytes(GP_OUT_STREAM_ORDERED);
    rep->outside_host = gp_outside_bytes(GP_OUT_HOST);
    rep->outside_unrouted = gp_outside_bytes(GP_OUT_UNROUTED);
    rep->gated_calls = gp_gate_calls();
    for (int d = 0; d < info.device_count && d < (int)GPCK_MAX_DEVICES; d++) {
        struct gp_pool_device_usage u;
        gp_pool_usage(d, &u);
        rep->devices[d] = (struct gpck_device_usage){ u.bytes_in_use, u.bytes_mapped, u.allocations,
                                                     gp_pool_chunks_in_use(d, NULL, 0) };
    }
    return 0;
}

static int handle_devices(struct gp_request *r)
{
    struct gpck_devices_rep *rep = r->reply;
    struct gp_shim_info info;
    gp_shim_info(&info);
    memset(rep, 0, sizeof(*rep));
    for (int d = 0; d < info.device_count && d < (int)GPCK_MAX_DEVICES; d++) {
        struct gpck_device_info *di = &rep->devices[d];
        CUdevice dev;
        if (GP_CALL(cuDeviceGet, &dev, d) != CUDA_SUCCESS)
            return -EIO;
        di->ordinal = d;
        GP_REAL(cuDeviceGetName)(di->name, (int)sizeof(di->name) - 1, dev);
        CUuuid uuid;
        if ((GP_HAS_REAL(cuDeviceGetUuid_v2) ? GP_REAL(cuDeviceGetUuid_v2)(&uuid, dev)
                                             : GP_REAL(cuDeviceGetUuid)(&uuid, dev)) == CUDA_SUCCESS)
            memcpy(di->uuid, uuid.bytes, sizeof(di->uuid));
        size_t total = 0;
        GP_REAL(cuDeviceTotalMem_v2)(&total, dev);
        di->total_memory = total;
        GP_REAL(cuDeviceGetAttribute)(&di->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
        GP_REAL(cuDeviceGetAttribute)(&di->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
        rep->count++;
    }
    return 0;
}

/* Closing the gate stops new calls; draining waits for those in flight;
 * synchronising every context waits for the work they queued. After that
 * device memory holds still until the gate reopens. */
static int handle_quiesce(struct gp_request *r)
{
    struct gp_client *c = r->client;
    struct gpck_quiesce_rep *rep = r->reply;
    const struct gpck_quiesce_req *req = gp_request_payload(r, sizeof(*req));
    if (!req)
        return -EPROTO;
    if (req->flags & ~GPCK_QUIESCE_ROLLBACK)
        return -EINVAL;
    if (gate_holder)
        return gate_holder == c ? -EALREADY : -EBUSY;
    bool rollback = req->flags & GPCK_QUIESCE_ROLLBACK;
    c->lease_ms = req->lease_ms ? req->lease_ms : GPCK_DEFAULT_LEASE_MS;
    memset(rep, 0, sizeof(*rep));
    if (suspension == HALF_RESTORED) {
        /* Held already, the gate closed: only a rollback may take it. */
        if (!rollback)
            return -ENOTRECOVERABLE;
        take_gate(c, true);
        return 0;
    }
    if (suspension != RUNNING)
        return -EBUSY;
    int err = gp_gate_close(c->lease_ms, &rep->drain_ns);
    if (err)
        return err;
    struct gp_shim_info info;
    gp_shim_info(&info);
    uint64_t t0 = gp_now_ns();
    CUresult cu = CUDA_SUCCESS;
    err = gp_contexts_sync_all(info.device_count, &cu);
    rep->sync_ns = gp_now_ns() - t0;
    if (err) {
        GP_ERROR("control", "quiesce: context synchronise failed (CUresult %d)", (int)cu);
        gp_gate_open();
        return err;
    }
    take_gate(c, rollback);
    return 0;
}

static int handle_resume(struct gp_request *r)
{
    struct gp_client *c = r->client;
    struct gpck_resume_rep *rep = r->reply;
    if (gate_holder != c)
        return -EPERM;
    /* Never onto a pool that holds part of an image. */
    if ((suspension == ROLLING_BACK && !restore_complete) || suspension == HALF_RESTORED)
        return -EPERM;
    rep->closed_ns = run_again(c);
    return 0;
}

static int read_suspend_req(const struct gp_request *r, const struct gpck_suspend_req **out)
{
    const struct gpck_suspend_req *req = gp_request_payload(r, sizeof(*req));
    if (!req)
        return -EPROTO;
    if (!memchr(req->image, 0, sizeof(req->image)))
        return -ENAMETOOLONG;
    if ((req->flags & ~(GPCK_SUSPEND_HOLD_STAGING | GPCK_SUSPEND_HOLD_PEER)) ||
        (req->flags & GPCK_SUSPEND_HOLD_STAGING && req->flags & GPCK_SUSPEND_HOLD_PEER))
        return -EINVAL;
    *out = req;
    return 0;
}

static int handle_suspend_pool(struct gp_request *r)
{
    struct gp_client *c = r->client;
    struct gpck_pool_rep *rep = r->reply;
    const struct gpck_suspend_req *req;
    int err = read_suspend_req(r, &req);
    if (err)
        return err;
    if (gate_holder != c || suspension != RUNNING)
        return -EPERM;
    /* A live copy may be reading the pool from the control thread's
     * streams between requests: its memory stays until it is done. */
    if (live_windows)
        return -EBUSY;
    bool hold = req->flags & GPCK_SUSPEND_HOLD_STAGING;
    bool on_gpu = req->flags & GPCK_SUSPEND_HOLD_PEER;
    if (hold && !c->staging.base)
        return -ENOENT;
    if (on_gpu && !gp_peer_held_complete())
        return -EINVAL;
    uint64_t t_asked = gp_now_ns();
    if (!on_gpu)
        gp_peer_drop();
    gp_staging_releases_wait();
    uint64_t t_waited = gp_now_ns();
    /* Held elsewhere than in private memory, the process may be dumped by
     * CRIU next (a whole-process checkpoint): it must not take the spare
     * host memory along as the application's. */
    if (!(hold && c->staging.anon))
        gp_spare_drop();
    *rep = (struct gpck_pool_rep){ 0 };
    uint64_t t0 = gp_now_ns();
    /* Pinned staging is CUDA state too: unpin it before the driver saves it. */
    if (hold)
        gp_staging_hold(&c->staging, &held_data);
    else
        gp_staging_unpin(&c->staging);
    uint64_t t_unpinned = gp_now_ns();
    gp_staging_destroy(&c->staging); /* held: nothing is left to unmap */
    uint64_t t_unmapped = gp_now_ns();
    err = gp_pool_release_all(&rep->bytes);
    uint64_t t_released = gp_now_ns();
    /* Not fatal: the driver's checkpoint then copies the stacks too. */
    struct gp_shim_info info;
    gp_shim_info(&info);
    CUresult cu = CUDA_SUCCESS;
    if (!gp_shim_config()->keep_stacks && gp_contexts_shrink_stacks(info.device_count, &cu))
        GP_WARN("control", "suspend: a context's stack limit could not be lowered (CUresult %d); its local memory is "
                "checkpointed whole", (int)cu);
    rep->ns = gp_now_ns() - t0;
    /* The driver's checkpoint comes next: what it maps is recorded. */
    if (!gp_shim_config()->keep_driver_zeros)
        gp_driver_mappings_watch(true);
    memcpy(held_image, req->image, sizeof(held_image));
    /* Suspended even when part of the pool could not be released: the part
     * that was is gone, and the data is where req says; the controller
     * resumes from there (remap skips what is still mapped). */
    suspension = SUSPENDED;
    let_go(c); /* the gate stays closed, held by no one */
    const char *where = hold ? "in host memory, described at" : on_gpu ? "on another GPU, described at" : "at";
    if (err)
        GP_ERROR("control", "suspend: the driver kept part of the pool mapped; suspended with the data %s %s", where,
                 held_image);
    else
        GP_INFO("control",
                "suspended: released %llu MiB (copies and releases waited for %.3f s, spare memory dropped %.3f s, staging "
                "unpinned %.3f s, unmapped %.3f s, pool %.3f s, stacks %.3f s); data held %s %s",
                (unsigned long long)(rep->bytes >> 20), (t_waited - t_asked) / 1e9, (t0 - t_waited) / 1e9,
                (t_unpinned - t0) / 1e9, (t_unmapped - t_unpinned) / 1e9, (t_released - t_unmapped) / 1e9,
                (t0 + rep->ns - t_released) / 1e9, where, held_image);
    return err;
}

static int handle_drop_held(struct gp_request *r)
{
    const struct gpck_suspend_req *req;
    int err = read_suspend_req(r, &req);
    if (err)
        return err;
    if (suspension != SUSPENDED)
        return -EINVAL;
    if (!held_data.base && !gp_peer_held_any())
        return -ENOENT;
    uint64_t t0 = gp_now_ns(), bytes = held_data.size;
    gp_held_drop(&held_data);
    gp_peer_drop();
    memcpy(held_image, req->image, sizeof(held_image));
    GP_DEBUG("control", "held data dropped: %llu MiB in %.3f s", (unsigned long long)(bytes >> 20),
             (double)(gp_now_ns() - t0) / 1e9);
    return 0;
}

static int handle_driver_zeros(struct gp_request *r)
{
    struct gpck_driver_zeros_rep *rep = r->reply;
    if (suspension != SUSPENDED)
        return -EINVAL;
    uint64_t t0 = gp_now_ns();
    struct gp_zero_drop drop;
    int err = gp_drop_driver_zeros(&drop);
    *rep = (struct gpck_driver_zeros_rep){
        .mappings = drop.mappings, .scanned_bytes = drop.scanned, .dropped_bytes = drop.dropped, .ns = gp_now_ns() - t0
    };
    /* The controller logs the figures. Pages kept cost CRIU their bytes, nothing more. */
    if (err)
        GP_WARN("control", "driver's copy: some zero pages kept (madvise: %s)", strerror(-err));
    return 0;
}

static int handle_remap_pool(struct gp_request *r)
{
    struct gp_client *c = r->client;
    struct gpck_pool_rep *rep = r->reply;
    if (suspension != SUSPENDED)
        return suspension == RESTORING ? -EBUSY : -EINVAL;
    *rep = (struct gpck_pool_rep){ 0 };
    uint64_t t0 = gp_now_ns();
    CUresult cu = CUDA_SUCCESS;
    bool on_gpu = gp_peer_held_any();
    /* The stacks first: their local memory comes back before the pool takes the room. */
    int err = gp_contexts_restore_stacks(&cu);
    if (!err)
        err = on_gpu ? gp_peer_remap(&rep->bytes, &rep->bytes_copied, &cu) : gp_pool_remap_all(&rep->bytes, &cu);
    rep->ns = gp_now_ns() - t0;
    if (err) {
        GP_WARN("control", "remap failed (%d, CUresult %d): still suspended", err, (int)cu);
        return err;
    }
    if (on_gpu)
        GP_INFO("control", "remapped the pool from the memory held on the GPU: %llu MiB in place, %llu MiB copied from "
                "another GPU", (unsigned long long)((rep->bytes - rep->bytes_copied) >> 20),
                (unsigned long long)(rep->bytes_copied >> 20));
    suspension = RESTORING;
    /* The driver has restored: what it maps now is live, never to be dropped. */
    gp_driver_mappings_watch(false);
    /* Held on a GPU, the data is in the pool once it is mapped. */
    restore_complete = on_gpu;
    take_gate(c, false);
    c->lease_ms = GPCK_DEFAULT_LEASE_MS;
    return 0;
}

static int handle_list_allocs(struct gp_request *r)
{
    void *reply = r->reply;
    uint32_t *reply_len = &r->reply_len;
    const struct gpck_list_req *req = gp_request_payload(r, sizeof(*req));
    if (!req)
        return -EPROTO;
    uint32_t max = req->max_entries;
    uint32_t room = (GPCK_MAX_MESSAGE - sizeof(struct gpck_header) - sizeof(struct gpck_list_rep)) /
                    sizeof(struct gpck_alloc_entry);
    if (max == 0 || max > GPCK_MAX_LIST_ENTRIES)
        return -EINVAL;
    if (max > room)
        max = room;
    struct gp_pool_entry entries[GPCK_MAX_LIST_ENTRIES];
    uint32_t count;
    uint64_t next;
    bool more;
    gp_pool_list(req->start_addr, entries, max, &count, &next, &more);
    struct gpck_list_rep *rep = reply;
    rep->count = count;
    rep->more = more;
    rep->next_addr = next;
    for (uint32_t i = 0; i < count; i++)
        rep->entries[i] = (struct gpck_alloc_entry){ .device = (uint32_t)entries[i].device,
                                                     .addr = entries[i].addr,
                                                     .size = entries[i].size };
    *reply_len = (uint32_t)(sizeof(*rep) + count * sizeof(struct gpck_alloc_entry));
    return 0;
}

/* The device whose context pins staging: the first with an active primary
 * context, else the first holding pool memory, else -1 (torchrun's
 * launcher): pinning needs a context, and making one gives a process
 * without GPU work ~520 MiB of state that each driver checkpoint then
 * saves (0.04 -> 0.3-0.4 s: test/gpu/probes/idle_member.c). */
static int staging_device(void)
{
    struct gp_shim_info info;
    gp_shim_info(&info);
    for (int d = 0; d < info.device_count; d++) {
        unsigned int flags;
        int active = 0;
        if (GP_REAL(cuDevicePrimaryCtxGetState)(d, &flags, &active) == CUDA_SUCCESS && active)
            return d;
    }
    for (int d = 0; d < info.device_count; d++) {
        struct gp_pool_device_usage u;
        gp_pool_usage(d, &u);
        if (u.allocations)
            return d;
    }
    return -1;
}

/* Staging of the kind the request asks for, into c->staging. */
static int map_staging(struct gp_client *c, const struct gpck_staging_req *req, struct gp_fds_in *given)
{
    int device = staging_device();
    if (req->flags & GPCK_STAGING_GIVEN) {
        if (given->count != req->files)
            return -EINVAL; /* the server closes them */
        uint32_t n = given->count;
        given->count = 0; /* taken: gp_staging_take closes them */
        return gp_staging_take(given->fds, n, req->size, req->file_bytes, req->flags & GPCK_STAGING_UNPINNED, device,
                               &c->staging);
    }
    if (req->flags & GPCK_STAGING_HELD)
        return gp_staging_adopt(&held_data, device, &c->staging);
    return gp_staging_create(req->size, req->flags & GPCK_STAGING_PRIVATE, device, &c->staging);
}

static int handle_staging_map(struct gp_request *r)
{
    struct gp_client *c = r->client;
    struct gp_fds_in *given = r->given;
    struct gpck_staging_rep *rep = r->reply;
    struct gp_fds *send = &r->send;
    const struct gpck_staging_req *req = gp_request_payload(r, sizeof(*req));
    if (!req)
        return -EPROTO;
    const uint32_t kinds = GPCK_STAGING_HELD | GPCK_STAGING_PRIVATE | GPCK_STAGING_GIVEN;
    if ((req->flags & ~(kinds | GPCK_STAGING_READY | GPCK_STAGING_UNPINNED)) ||
        __builtin_popcount(req->flags & kinds) > 1 ||
        (!(req->flags & GPCK_STAGING_GIVEN) && (req->files || req->file_bytes || given->count ||
                                               (req->flags & GPCK_STAGING_UNPINNED))))
        return -EINVAL;
    gp_staging_destroy(&c->staging);
    memset(rep, 0, sizeof(*rep));
    uint64_t t0 = gp_now_ns();
    int err = map_staging(c, req, given);
    if (!err && (req->flags & GPCK_STAGING_READY))
        gp_staging_wait_all(&c->staging);
    rep->register_ns = gp_now_ns() - t0;
    if (err)
        return err;
    rep->size = c->staging.size;
    rep->file_bytes = c->staging.file_bytes; /* 0 for staging without memfds */
    rep->files = c->staging.nfds;
    *send = (struct gp_fds){ .fds = c->staging.fds, .count = c->staging.nfds };
    return 0;
}

static int copy_stream(int device, CUstream *out)
{
    CUresult cu = CUDA_SUCCESS;
    int err = gp_contexts_use_primary(device, &cu);
    if (err)
        return err;
    if (!copy_streams[device] &&
        GP_CALL(cuStreamCreate, &copy_streams[device], CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        copy_streams[device] = NULL;
        return -EIO;
    }
    *out = copy_streams[device];
    return 0;
}

/* What a copy out or a digest of c may read. With the gate held by c:
 * live allocations only. In c's live window, with the application running:
 * any mapped pool memory, because an allocation may be freed while it is
 * read; the window keeps it mapped (gp_pool_keep_mapped). */
static bool may_read(const struct gp_client *c, int device, uint64_t addr, uint64_t len)
{
    return gate_holder == c ? gp_pool_range_is_live(device, addr, len) : gp_pool_range_is_mapped(device, addr, len);
}

/* Reads outside a pause: only in c's live window of a running pool. */
static bool reads_unheld(const struct gp_client *c)
{
    return gate_holder != c && c->live && suspension == RUNNING;
}

/* Every range is checked before any byte moves: it must lie inside one live
 * allocation of the pool (mapped pool memory, in a live window), or with
 * mirrored inside the peer mirror (its address there goes to mirrored), and
 * inside the staging memory (zeros read none: offset 0), so nothing a
 * controller (or an image) says can make the shim touch other memory. */
static int check_ranges(const struct gp_client *c, const struct gpck_copy_req *req, struct gpck_copy_req *mirrored)
{
    bool zeros = req->flags & GPCK_COPY_ZEROS;
    struct gp_shim_info info;
    gp_shim_info(&info);
    for (uint32_t i = 0; i < req->count; i++) {
        const struct gpck_copy_range *r = &req->ranges[i];
        if (r->device >= (uint32_t)info.device_count || r->device >= GPCK_MAX_DEVICES)
            return -ENODEV;
        if (mirrored) {
            mirrored->ranges[i] = *r;
            if (gp_peer_mirror_at((int)r->device, r->addr, r->length, &mirrored->ranges[i].addr))
                return -EFAULT;
        } else if (!may_read(c, (int)r->device, r->addr, r->length)) {
            return -EFAULT;
        }
        if (zeros) {
            if (r->staging_offset)
                return -EINVAL;
        } else if (r->staging_offset > c->staging.size || r->length > c->staging.size - r->staging_offset)
            return -ERANGE;
    }
    return 0;
}

/* Waits for the copy streams of the devices used; err, or -EIO when it
 * was 0 and a wait failed. */
static int sync_streams(const bool used[GPCK_MAX_DEVICES], int err)
{
    for (int d = 0; d < (int)GPCK_MAX_DEVICES; d++) {
        CUstream s;
        if (!used[d] || copy_stream(d, &s))
            continue;
        if (GP_CALL(cuStreamSynchronize, s) != CUDA_SUCCESS && !err)
            err = -EIO;
    }
    return err;
}

/* Each range straight between the pool and staging, piece by piece of the
 * staging, each as soon as it is pinned: the DMA of one overlaps the
 * preparation of the next. */
static int copy_direct(struct gp_client *c, bool to_host, const struct gpck_copy_req *req)
{
    int err = 0;
    bool used[GPCK_MAX_DEVICES] = { false };
    for (uint32_t i = 0; i < req->count && !err; i++) {
        const struct gpck_copy_range *r = &req->ranges[i];
        CUstream s;
        err = copy_stream((int)r->device, &s);
        if (err)
            break;
        used[r->device] = true;
        for (uint64_t done = 0; done < r->length && !err;) {
            uint64_t off = r->staging_offset + done;
            uint64_t end = gp_staging_ready(&c->staging, off);
            uint64_t n = end - off < r->length - done ? end - off : r->length - done;
            void *host = c->staging.base + off;
            CUresult cu = to_host ? GP_CALL(cuMemcpyDtoHAsync_v2, host, r->addr + done, n, s)
                                  : GP_CALL(cuMemcpyHtoDAsync_v2, r->addr + done, host, n, s);
            if (cu != CUDA_SUCCESS) {
                GP_ERROR("control", "copy %s 0x%llx+%llu failed (CUresult %d)", to_host ? "out" : "in",
                         (unsigned long long)(r->addr + done), (unsigned long long)n, (int)cu);
                err = -EIO;
            }
            done += n;
        }
    }
    /* Wait for everything queued, also after a failure, so no DMA is left
     * writing into memory the controller is about to reuse. */
    return sync_streams(used, err);
}

/* Every range set to zero on the GPU, on the copy streams, and waited for
 * (also after a failure: nothing is left writing once the reply goes). */
static int fill_zeros(const struct gpck_copy_req *req)
{
    int err = 0;
    bool used[GPCK_MAX_DEVICES] = { false };
    for (uint32_t i = 0; i < req->count && !err; i++) {
        const struct gpck_copy_range *r = &req->ranges[i];
        CUstream s;
        err = copy_stream((int)r->device, &s);
        if (err)
            break;
        used[r->device] = true;
        CUresult cu = GP_CALL(cuMemsetD8Async, r->addr, 0, r->length, s);
        if (cu != CUDA_SUCCESS) {
            GP_ERROR("control", "zero fill 0x%llx+%llu failed (CUresult %d)", (unsigned long long)r->addr,
                     (unsigned long long)r->length, (int)cu);
            err = -EIO;
        }
    }
    return sync_streams(used, err);
}

/* Every range through the staging's bounce ring. -EAGAIN: it could not
 * start, nothing was copied. */
static int copy_bounced(struct gp_client *c, bool to_host, const struct gpck_copy_req *req)
{
    static struct gp_bounce_span spans[GPCK_MAX_COPY_RANGES]; /* 160 KiB: off the stack; the control thread's alone */
    for (uint32_t i = 0; i < req->count; i++) {
        const struct gpck_copy_range *r = &req->ranges[i];
        int err = copy_stream((int)r->device, &spans[i].stream);
        if (err)
            return err;
        spans[i].device = (int)r->device;
        spans[i].dev = r->addr;
        spans[i].host = c->staging.base + r->staging_offset;
        spans[i].len = r->length;
    }
    return gp_bounce_copy(c->staging.bounce, to_host, spans, req->count);
}

static int copy_between(struct gp_request *r)
{
    struct gp_client *c = r->client;
    bool to_host = r->type == GPCK_COPY_OUT;
    struct gpck_copy_rep *rep = r->reply;
    const struct gpck_copy_req *req = r->payload;
    uint32_t len = r->len;
    if (len < sizeof(*req) || req->count > GPCK_MAX_COPY_RANGES ||
        len != sizeof(*req) + req->count * sizeof(struct gpck_copy_range))
        return -EPROTO;
    bool zeros = req->flags & GPCK_COPY_ZEROS;
    bool from_mirror = req->flags & GPCK_COPY_FROM_MIRROR;
    if ((req->flags & ~(GPCK_COPY_COMPLETES | GPCK_COPY_ZEROS | GPCK_COPY_FROM_MIRROR)) || (to_host && zeros) ||
        (from_mirror && !to_host))
        return -EINVAL;
    /* Copies are only consistent while the application is held still; a
     * live window's copies out are not, and its controller knows it. The
     * mirror holds still by itself. */
    if (gate_holder != c && !(to_host && (reads_unheld(c) || from_mirror)))
        return -EPERM;
    /* The ranges as read from the mirror (160 KiB): off the stack; the control thread's alone. */
    static union {
        struct gpck_copy_req req;
        char bytes[sizeof(struct gpck_copy_req) + GPCK_MAX_COPY_RANGES * sizeof(struct gpck_copy_range)];
    } mirrored;
    /* Writing into a running process's pool is a rollback's alone. */
    if (!to_host && suspension != RESTORING && !c->rollback)
        return -EPERM;
    if (!c->staging.base && !zeros)
        return -ENOBUFS;
    int err = check_ranges(c, req, from_mirror ? &mirrored.req : NULL);
    if (err)
        return err;
    if (from_mirror) {
        mirrored.req.count = req->count;
        mirrored.req.flags = req->flags;
        req = &mirrored.req;
    }
    if (!to_host) {
        if (suspension == RUNNING || suspension == HALF_RESTORED)
            suspension = ROLLING_BACK;
        restore_complete = false;
    }
    uint64_t t0 = gp_now_ns(), bytes = 0;
    for (uint32_t i = 0; i < req->count; i++)
        bytes += req->ranges[i].length;
    if (!zeros)
        gp_staging_copy_starts(&c->staging); /* its workers need the cores */
    err = zeros ? fill_zeros(req) : c->staging.bounce ? copy_bounced(c, to_host, req) : -EAGAIN;
    if (err == -EAGAIN)
        err = copy_direct(c, to_host, req);
    rep->bytes = bytes;
    rep->ns = gp_now_ns() - t0;
    if (!to_host && !err && (req->flags & GPCK_COPY_COMPLETES))
        restore_complete = true;
    return err;
}

static int handle_copy_out(struct gp_request *r)
{
    return copy_between(r);
}

static int handle_copy_in(struct gp_request *r)
{
    return copy_between(r);
}

static int handle_staging_unmap(struct gp_request *r)
{
    gp_staging_destroy(&r->client->staging);
    return 0;
}

/* Digests are only meaningful while the application is held still, and
 * only of memory inside live allocations (the kernel reads nothing else),
 * of a pool in place (running, or being rolled back: what a rollback wrote
 * can be checked);
 * loading the kernel (count 0) needs a process the driver has not frozen
 * (a call into a checkpointed process would block the control thread). */
static int handle_block_digest(struct gp_request *r)
{
    struct gp_client *c = r->client;
    struct gpck_digest_rep *rep = r->reply;
    uint32_t *reply_len = &r->reply_len;
    const struct gpck_digest_req *req = r->payload;
    uint32_t len = r->len;
    if (len < sizeof(*req) || req->count > GPCK_MAX_DIGEST_RANGES ||
        len != sizeof(*req) + req->count * sizeof(struct gpck_digest_range))
        return -EPROTO;
    bool in_place = suspension == RUNNING || suspension == ROLLING_BACK;
    if (req->count ? !in_place || (gate_holder != c && !reads_unheld(c)) : suspension == SUSPENDED)
        return -EPERM;
    struct gp_shim_info info;
    gp_shim_info(&info);
    if (req->device >= (uint32_t)info.device_count || req->device >= GPCK_MAX_DEVICES)
        return -ENODEV;
    CUresult cu = CUDA_SUCCESS;
    if (!req->count) {
        *reply_len = sizeof(*rep);
        memset(rep, 0, sizeof(*rep));
        return gp_block_digest_load((int)req->device, &cu);
    }
    if (req->block_size < GPCK_MIN_DIGEST_BLOCK || req->block_size % GPCK_MIN_DIGEST_BLOCK)
        return -EINVAL;
    uint64_t blocks = 0;
    for (uint32_t i = 0; i < req->count; i++) {
        const struct gpck_digest_range *r = &req->ranges[i];
        /* Aligned: the kernel reads 8-byte words, and a misaligned read
         * would be a sticky error in the application's context. */
        if (!r->length || r->addr % 8)
            return -EINVAL;
        if (!may_read(c, (int)req->device, r->addr, r->length))
            return -EFAULT;
        blocks += (r->length - 1) / req->block_size + 1;
        if (blocks > GPCK_MAX_DIGESTS)
            return -EINVAL;
    }
    CUstream stream;
    int err = copy_stream((int)req->device, &stream);
    if (err)
        return err;
    uint64_t t0 = gp_now_ns();
    err = gp_block_digest((int)req->device, stream, req->ranges, req->count, req->block_size, rep->digests, &cu);
    if (err)
        return err;
    rep->blocks = blocks;
    rep->ns = gp_now_ns() - t0;
    *reply_len = (uint32_t)(sizeof(*rep) + blocks * sizeof(uint64_t));
    return 0;
}

static void close_live_window(struct gp_client *c)
{
    if (!c->live)
        return;
    c->live = false;
    live_windows--;
    gp_pool_keep_mapped(false);
}

static int handle_live_window(struct gp_request *r)
{
    struct gp_client *c = r->client;
    const struct gpck_live_req *req = gp_request_payload(r, sizeof(*req));
    if (!req || req->open > 1 || req->reserved)
        return -EPROTO;
    if (!req->open) {
        close_live_window(c);
        return 0;
    }
    if (suspension != RUNNING || !gp_pool_active())
        return -EPERM;
    if (!c->live) {
        gp_pool_keep_mapped(true);
        c->live = true;
        live_windows++;
    }
    return 0;
}

void gp_client_fds_sent(struct gp_client *c)
{
    gp_staging_close_files(&c->staging); /* the only fds a reply passes */
}

/* GPCK_PEER_INTO_POOL: the holder of the gate, after REMAP_POOL. */
static int peer_into_pool(struct gp_client *c, const struct gpck_peer_req *req, struct gp_fds_in *given,
                          struct gpck_peer_rep *rep, CUresult *cu)
{
    if (gate_holder != c || suspension != RESTORING)
        return -EPERM;
    if (!given->count)
        return -EINVAL;
    restore_complete = false;
    int err = gp_peer_copy_in((int)req->device, req->first, given->fds, given->count, &rep->bytes, cu);
    if (!err && (req->flags & GPCK_PEER_COMPLETES))
        restore_complete = true;
    return err;
}

/* GPCK_PEER_SNAPSHOT: out of the running pool by the gate's holder, or
 * back in (GPCK_PEER_INTO_POOL) by a rollback's. */
static int peer_snapshot(struct gp_client *c, const struct gpck_peer_req *req, struct gp_fds_in *given,
                         struct gpck_peer_rep *rep, CUresult *cu)
{
    bool in = req->flags & GPCK_PEER_INTO_POOL;
    if (gate_holder != c || (in ? !c->rollback : suspension != RUNNING))
        return -EPERM;
    if (!in && live_windows)
        return -EBUSY;
    if (!given->count || req->count != given->count)
        return -EINVAL; /* one run per fd */
    bool touched;
    int err = gp_snapshot_copy((int)req->device, req->runs, given->fds, given->count, !in, &rep->bytes, &touched, cu);
    /* A rollback is under way from its first copy, not before: one refused
     * before that (-ESTALE, no memory to map the snapshot) leaves the
     * application as it was. */
    if (in && touched) {
        if (suspension == RUNNING || suspension == HALF_RESTORED)
            suspension = ROLLING_BACK;
        restore_complete = !err && (req->flags & GPCK_PEER_COMPLETES);
    }
    return err;
}

/* GPCK_PEER_MIRROR: any client, while the pool runs. */
static int peer_mirror(struct gp_client *c, const struct gpck_peer_req *req, struct gp_fds_in *given,
                       struct gpck_peer_rep *rep, CUresult *cu)
{
    if (suspension != RUNNING)
        return -EPERM;
    if (!given->count)
        return -EINVAL;
    if (mirror_owner && mirror_owner != c)
        return -EBUSY;
    int err = gp_peer_mirror((int)req->device, req->first, given->fds, given->count, &rep->bytes, cu);
    mirror_owner = err ? mirror_owner : c;
    return err;
}

/* GPCK_PEER_ADOPT: any client, while suspended. */
static int peer_adopt(const struct gpck_peer_req *req, struct gp_fds_in *given, struct gpck_peer_rep *rep)
{
    if (suspension != SUSPENDED)
        return -EBUSY;
    if (!given->count)
        return gp_peer_make_room();
    int err = gp_peer_adopt((int)req->device, req->first, given->fds, given->count, &rep->chunks_held);
    if (!err)
        given->count = 0; /* held */
    return err;
}

static int handle_peer_hold(struct gp_request *r)
{
    struct gp_client *c = r->client;
    struct gp_fds_in *given = r->given;
    struct gpck_peer_rep *rep = r->reply;
    const struct gpck_peer_req *req = r->payload;
    if (r->len < sizeof(*req) || req->count > GPCK_MAX_STAGING_FILES ||
        r->len != sizeof(*req) + req->count * sizeof(struct gpck_chunk_run))
        return -EPROTO;
    *rep = (struct gpck_peer_rep){ 0 };
    bool snapshot = req->flags & GPCK_PEER_SNAPSHOT;
    uint32_t way = req->flags & ~(GPCK_PEER_COMPLETES | GPCK_PEER_SNAPSHOT);
    if ((way & (way - 1)) || (way & ~(GPCK_PEER_INTO_POOL | GPCK_PEER_MIRROR | GPCK_PEER_ADOPT)) ||
        (way != GPCK_PEER_INTO_POOL && (req->flags & GPCK_PEER_COMPLETES)) ||
        (snapshot && way && way != GPCK_PEER_INTO_POOL) || (!snapshot && req->count))
        return -EINVAL; /* one way at most; COMPLETES with INTO_POOL only; SNAPSHOT alone or INTO_POOL, runs only with it */
    uint64_t t0 = gp_now_ns();
    CUresult cu = CUDA_SUCCESS;
    if (snapshot) {
        int err = peer_snapshot(c, req, given, rep, &cu);
        rep->ns = gp_now_ns() - t0;
        if (err)
            GP_WARN("control", "could not copy a GPU-held snapshot of device %u %s (%d, CUresult %d)", req->device,
                    way ? "back in" : "out", err, (int)cu);
        return err;
    }
    if (way == GPCK_PEER_ADOPT)
        return peer_adopt(req, given, rep);
    if (way) {
        /* The fds are the sender's copies: closed here once imported. */
        int err = way == GPCK_PEER_INTO_POOL ? peer_into_pool(c, req, given, rep, &cu) : peer_mirror(c, req, given, rep, &cu);
        rep->ns = gp_now_ns() - t0;
        if (err)
            GP_WARN("control", "could not %s device %u's chunks from %llu (%d, CUresult %d)",
                    way == GPCK_PEER_INTO_POOL ? "copy back" : "mirror", req->device, (unsigned long long)req->first,
                    err, (int)cu);
        return err;
    }
    /* Copies are only consistent while the application is held still. */
    if (gate_holder != c || suspension != RUNNING)
        return -EPERM;
    if (live_windows)
        return -EBUSY;
    if (!given->count)
        return gp_peer_make_room();
    int err = gp_peer_hold((int)req->device, req->first, given->fds, given->count, &rep->bytes, &rep->chunks_held, &cu);
    rep->ns = gp_now_ns() - t0;
    if (err) {
        GP_WARN("control", "could not hold device %u's pool on another GPU (%d, CUresult %d): nothing is held",
                req->device, err, (int)cu);
        return err;
    }
    given->count = 0; /* held */
    return 0;
}

struct chunk_export {
    int fds[GPCK_MAX_STAGING_FILES];
    uint32_t count;
};

static int export_chunk(CUmemGenericAllocationHandle handle, void *arg)
{
    struct chunk_export *e = arg;
    if (e->count == GPCK_MAX_STAGING_FILES)
        return -E2BIG;
    int fd = -1;
    CUresult r = GP_CALL(cuMemExportToShareableHandle, &fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS)
        return -EIO;
    e->fds[e->count++] = fd;
    return 0;
}

static int handle_chunk_export(struct gp_request *r)
{
    const struct gpck_chunk_export_req *req = gp_request_payload(r, sizeof(*req));
    if (!req)
        return -EPROTO;
    if (suspension != RUNNING && suspension != ROLLING_BACK)
        return -EBUSY; /* suspended: the pool has no memory to show */
    if (!gp_pool_config()->exportable)
        return -EOPNOTSUPP; /* a GPU without POSIX fd handles: chunks made unexportable */
    /* The control thread's alone, and sent before the next request. */
    static struct chunk_export e;
    e.count = 0;
    struct gpck_chunk_export_rep *rep = r->reply;
    int device = 0;
    int err = gp_pool_each_chunk(req->addr, req->length, export_chunk, &e, &device, &rep->first);
    if (err) {
        for (uint32_t i = 0; i < e.count; i++)
            close(e.fds[i]);
        return err;
    }
    rep->device = (uint32_t)device;
    rep->count = e.count;
    r->send = (struct gp_fds){ e.fds, e.count, true };
    return 0;
}

static int handle_framework_free(struct gp_request *r)
{
    const struct gpck_framework_req *req = gp_request_payload(r, sizeof(*req));
    if (!req)
        return -EPROTO;
    /* What is unused is only still unused while the application is held. */
    if (gate_holder != r->client)
        return -EPERM;
    struct gpck_framework_rep *rep = r->reply;
    uint32_t count = 0;
    gp_framework_ask(req->timeout_ms, &rep->state, rep->framework, rep->why, rep->ranges, GPCK_MAX_FREE_RANGES, &count);
    rep->count = count;
    r->reply_len = (uint32_t)(sizeof(*rep) + count * sizeof(struct gpck_free_range));
    return 0;
}

int gp_handle_request(struct gp_request *r)
{
    r->send = (struct gp_fds){ 0 };
    switch (r->type) {
#define GP_MESSAGE(NAME, name, reply_size, takes_fds)                                                         \
    case GPCK_##NAME:                                                                                           \
        if (r->given->count && !(takes_fds))                                                                    \
            return -EINVAL; /* only staging and peer memory bring fds */                                        \
        r->reply_len = (reply_size);                                                                            \
        return handle_##name(r);
#include "messages.gen.h"
#undef GP_MESSAGE
    default:
        return -EOPNOTSUPP;
    }
}

void gp_client_drop_gate(struct gp_client *c, const char *why)
{
    if (gate_holder != c)
        return;
    if ((suspension == RESTORING || suspension == ROLLING_BACK) && restore_complete) {
        /* The data is all back: as if the controller had resumed. */
        uint64_t ns = run_again(c);
        GP_WARN("control", "%s after the data was all restored: resumed the application after %.3f s", why, ns / 1e9);
        return;
    }
    if (suspension == ROLLING_BACK || suspension == HALF_RESTORED) {
        /* Part of an image is in the pool: running on would compute on a
         * mix of two states. Held, until a rollback completes. */
        suspension = HALF_RESTORED;
        let_go(c);
        GP_ERROR("control", "%s during a rollback: the pool holds part of the image, so the application stays "
                 "paused until an image is restored into it again (gpuckpt restore IMAGE --into %d)", why, (int)getpid());
        return;
    }
    if (suspension == RESTORING) {
        /* The data never came back: release the pool again and keep the
         * application held; the image at held_image still has it all. */
        uint64_t released;
        gp_pool_release_all(&released);
        suspension = SUSPENDED;
        let_go(c);
        GP_WARN("control", "%s during resume: still suspended, data at %s", why, held_image);
        return;
    }
    uint64_t ns = gp_gate_open();
    gp_peer_drop(); /* a migrate cut off before its suspend */
    GP_WARN("control", "%s with the application paused; resumed it after %.3f s", why, ns / 1e9);
    let_go(c);
}

void gp_client_release(struct gp_client *c)
{
    gp_client_drop_gate(c, "controller left");
    if (mirror_owner == c) {
        gp_peer_mirror_drop();
        mirror_owner = NULL;
    }
    close_live_window(c);
    gp_collective_client_gone(c);
    /* Unpinning and unmapping 16 GiB took 1.4 s, which the next
     * controller's hello waited for (a restore right after a checkpoint). */
    struct gp_held none = { 0 };
    gp_staging_release_later(&c->staging, &none);
}
