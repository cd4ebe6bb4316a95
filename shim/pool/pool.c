/* Fixed-address device-memory pool: reservation, per-device slices, chunked
 * physical mapping. See pool.h for the model. */
#define _GNU_SOURCE
#include "pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct chunk {
    CUmemGenericAllocationHandle handle;
    uint64_t used;  /* bytes of live allocations overlapping this chunk */
    bool mapped;
};

struct slice {
    pthread_mutex_t lock;
    int device;
    uint64_t base;
    struct gp_alloc *alloc;
    struct chunk *chunks;
    size_t chunk_count;
    uint64_t bytes_mapped;
    /* Devices given access to this slice's memory: the owner, then every
     * peer that can reach it, so cudaDeviceEnablePeerAccess-style use of
     * pool memory from another GPU works as with cudaMalloc. */
    CUmemAccessDesc access[GP_POOL_MAX_DEVICES];
    size_t access_count;
};

static struct {
    bool active;
    struct gp_pool_config cfg;
    struct gp_vmm_ops ops;
    struct slice slices[GP_POOL_MAX_DEVICES];
    /* > 0: chunks emptied by frees stay mapped (see gp_pool_keep_mapped). */
    int keep_mapped;
} pool;

static int cu_fail(CUresult r, CUresult *cu_err, int err)
{
    if (cu_err)
        *cu_err = r;
    return err;
}

static int slice_of(CUdeviceptr ptr)
{
    if (!pool.active || ptr < pool.cfg.base)
        return -1;
    uint64_t off = ptr - pool.cfg.base;
    uint64_t d = off / pool.cfg.slice_size;
    return d < (uint64_t)pool.cfg.device_count ? (int)d : -1;
}

static void setup_access(struct slice *s)
{
    s->access_count = 0;
    CUmemAccessDesc *own = &s->access[s->access_count++];
    own->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    own->location.id = s->device;
    own->flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (!pool.ops.device_can_access_peer)
        return;
    for (int p = 0; p < pool.cfg.device_count; p++) {
        int can = 0;
        if (p == s->device || pool.ops.device_can_access_peer(&can, p, s->device) != CUDA_SUCCESS || !can)
            continue;
        CUmemAccessDesc *d = &s->access[s->access_count++];
        d->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        d->location.id = p;
        d->flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
}

int gp_pool_init(const struct gp_pool_config *cfg, const struct gp_vmm_ops *ops, CUresult *cu_err)
{
    if (pool.active)
        return -EALREADY;
    if (cfg->device_count < 1 || cfg->device_count > GP_POOL_MAX_DEVICES || !cfg->slice_size || !cfg->chunk_size ||
        cfg->slice_size % cfg->chunk_size || cfg->base % cfg->chunk_size || !cfg->quantum ||
        (cfg->quantum & (cfg->quantum - 1)) || cfg->chunk_size % cfg->quantum)
        return -EINVAL;
    if (cfg->slice_size > UINT64_MAX / (uint64_t)cfg->device_count)
        return -EINVAL;

    for (int d = 0; d < cfg->device_count; d++) {
        CUmemAllocationProp prop = {0};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = d;
        size_t gran = 0;
        CUresult r = ops->mem_get_allocation_granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        if (r != CUDA_SUCCESS)
            return cu_fail(r, cu_err, -ENOTSUP);
        if (!gran || cfg->chunk_size % gran)
            return -EINVAL;
    }

    uint64_t total = cfg->slice_size * (uint64_t)cfg->device_count;
    CUdeviceptr got = 0;
    CUresult r = ops->mem_address_reserve(&got, total, cfg->chunk_size, cfg->base, 0);
    if (r != CUDA_SUCCESS)
        return cu_fail(r, cu_err, -ENOMEM);
    if (got != cfg->base) {
        /* Another address would break the promise of identical addresses
         * across runs and restores: give it back and let the caller fall
         * back to pass-through. */
        ops->mem_address_free(got, total);
        return -EADDRNOTAVAIL;
    }

    pool.cfg = *cfg;
    pool.ops = *ops;
    for (int d = 0; d < cfg->device_count; d++) {
        struct slice *s = &pool.slices[d];
        memset(s, 0, sizeof(*s));
        pthread_mutex_init(&s->lock, NULL);
        s->device = d;
        s->base = cfg->base + (uint64_t)d * cfg->slice_size;
        s->chunk_count = cfg->slice_size / cfg->chunk_size;
        s->chunks = calloc(s->chunk_count, sizeof(*s->chunks));
        int err = s->chunks ? gp_alloc_create(s->base, cfg->slice_size, cfg->quantum, &s->alloc) : -ENOMEM;
        if (err) {
            for (int k = 0; k <= d; k++) {
                free(pool.slices[k].chunks);
                gp_alloc_destroy(pool.slices[k].alloc);
            }
            ops->mem_address_free(got, total);
            return err;
        }
        setup_access(s);
    }
    __atomic_store_n(&pool.active, true, __ATOMIC_RELEASE);
    return 0;
}

bool gp_pool_active(void)
{
    return __atomic_load_n(&pool.active, __ATOMIC_ACQUIRE);
}

const struct gp_pool_config *gp_pool_config(void)
{
    return gp_pool_active() ? &pool.cfg : NULL;
}

static uint64_t chunk_addr(const struct slice *s, size_t i)
{
    return s->base + (uint64_t)i * pool.cfg.chunk_size;
}

/* Maps handle (which the chunk then owns) at chunk i and gives the slice's
 * devices access; on failure the handle is released. */
static int map_chunk_handle(struct slice *s, size_t i, CUmemGenericAllocationHandle handle, CUresult *cu_err)
{
    CUresult r = pool.ops.mem_map(chunk_addr(s, i), pool.cfg.chunk_size, 0, handle, 0);
    if (r == CUDA_SUCCESS) {
        r = pool.ops.mem_set_access(chunk_addr(s, i), pool.cfg.chunk_size, s->access, s->access_count);
        if (r != CUDA_SUCCESS && s->access_count > 1) {
            /* A peer refused the mapping: serve the owner alone from now on
             * rather than failing allocations. */
            s->access_count = 1;
            r = pool.ops.mem_set_access(chunk_addr(s, i), pool.cfg.chunk_size, s->access, 1);
        }
        if (r != CUDA_SUCCESS)
            pool.ops.mem_unmap(chunk_addr(s, i), pool.cfg.chunk_size);
    }
    if (r != CUDA_SUCCESS) {
        pool.ops.mem_release(handle);
        return cu_fail(r, cu_err, r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO);
    }
    s->chunks[i].handle = handle;
    s->chunks[i].mapped = true;
    s->bytes_mapped += pool.cfg.chunk_size;
    return 0;
}

static int map_chunk(struct slice *s, size_t i, CUresult *cu_err)
{
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = s->device;
    /* Exportable where every GPU allows it: gpuckpt peek and poke map a chunk into another process. */
    if (pool.cfg.exportable)
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemGenericAllocationHandle handle;
    CUresult r = pool.ops.mem_create(&handle, pool.cfg.chunk_size, &prop, 0);
    if (r != CUDA_SUCCESS)
        return cu_fail(r, cu_err, r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO);
    return map_chunk_handle(s, i, handle, cu_err);
}

/* A chunk the driver would not unmap stays mapped (and counted): marking it
 * free would make the next map of that address fail. */
static int unmap_chunk(struct slice *s, size_t i)
{
    struct chunk *c = &s->chunks[i];
    if (pool.ops.mem_unmap(chunk_addr(s, i), pool.cfg.chunk_size) != CUDA_SUCCESS)
        return -EIO;
    pool.ops.mem_release(c->handle);
    c->mapped = false;
    c->handle = 0;
    s->bytes_mapped -= pool.cfg.chunk_size;
    return 0;
}

/* Adds (sign=+1) or removes (sign=-1) the bytes of [addr, addr+size) to the
 * per-chunk use counts. */
static void account_chunks(struct slice *s, uint64_t addr, uint64_t size, int sign)
{
    uint64_t off = addr - s->base, end = off + size, cs = pool.cfg.chunk_size;
    for (size_t i = off / cs; i * cs < end; i++) {
        uint64_t lo = i * cs > off ? i * cs : off;
        uint64_t hi = (i + 1) * cs < end ? (i + 1) * cs : end;
        if (sign > 0)
            s->chunks[i].used += hi - lo;
        else
            s->chunks[i].used -= hi - lo;
    }
}

static uint64_t slice_in_use(const struct slice *s)
{
    struct gp_alloc_stats st;
    gp_alloc_stats(s->alloc, &st);
    return st.bytes_in_use;
}

/* Unmaps empty chunks in [addr, addr+size) while the slice holds more free
 * mapped memory than the retain budget. */
static void trim_chunks(struct slice *s, uint64_t addr, uint64_t size)
{
    uint64_t off = addr - s->base, end = off + size, cs = pool.cfg.chunk_size;
    if (pool.keep_mapped)
        return;
    uint64_t in_use = slice_in_use(s);
    for (size_t i = off / cs; i * cs < end; i++) {
        if (!s->chunks[i].mapped || s->chunks[i].used)
            continue;
        if (s->bytes_mapped - in_use <= pool.cfg.retain_bytes)
            break;
        unmap_chunk(s, i);
    }
}

int gp_pool_alloc(int device, uint64_t size, uint64_t align, CUdeviceptr *out, CUresult *cu_err)
{
    if (!gp_pool_active() || device < 0 || device >= pool.cfg.device_count)
        return -ENODEV;
    if (!size)
        return -EINVAL;
    struct slice *s = &pool.slices[device];
    pthread_mutex_lock(&s->lock);
    uint64_t addr;
    int err = gp_alloc_get(s->alloc, size, align < pool.cfg.quantum ? pool.cfg.quantum : align, &addr);
    if (err) {
        pthread_mutex_unlock(&s->lock);
        return err;
    }
    struct gp_extent ext;
    gp_alloc_find(s->alloc, addr, &ext);
    uint64_t cs = pool.cfg.chunk_size, off = addr - s->base;
    size_t first = off / cs, last = (off + ext.size - 1) / cs;
    for (size_t i = first; i <= last; i++) {
        if (s->chunks[i].mapped)
            continue;
        err = map_chunk(s, i, cu_err);
        if (err) {
            /* Roll back: chunks mapped here hold nothing else yet. */
            for (size_t k = first; k < i; k++)
                if (s->chunks[k].mapped && !s->chunks[k].used)
                    unmap_chunk(s, k);
            gp_alloc_put(s->alloc, addr, NULL);
            pthread_mutex_unlock(&s->lock);
            return err;
        }
    }
    account_chunks(s, addr, ext.size, +1);
    pthread_mutex_unlock(&s->lock);
    *out = addr;
    return 0;
}

int gp_pool_free(CUdeviceptr ptr, CUresult *cu_err)
{
    (void)cu_err;
    int d = slice_of(ptr);
    if (d < 0)
        return -ENOENT;
    struct slice *s = &pool.slices[d];
    pthread_mutex_lock(&s->lock);
    uint64_t size;
    int err = gp_alloc_put(s->alloc, ptr, &size);
    if (!err) {
        account_chunks(s, ptr, size, -1);
        trim_chunks(s, ptr, size);
    }
    pthread_mutex_unlock(&s->lock);
    return err;
}

bool gp_pool_contains(CUdeviceptr ptr)
{
    return slice_of(ptr) >= 0;
}

int gp_pool_find(CUdeviceptr ptr, struct gp_extent *ext, int *device)
{
    int d = slice_of(ptr);
    if (d < 0)
        return -ENOENT;
    struct slice *s = &pool.slices[d];
    pthread_mutex_lock(&s->lock);
    int err = gp_alloc_find(s->alloc, ptr, ext);
    pthread_mutex_unlock(&s->lock);
    if (!err && device)
        *device = d;
    return err;
}

int gp_pool_each_chunk(CUdeviceptr addr, uint64_t len, int (*fn)(CUmemGenericAllocationHandle handle, void *arg),
                       void *arg, int *device, uint64_t *first)
{
    int d = slice_of(addr);
    if (d < 0 || !len)
        return -EFAULT;
    struct slice *s = &pool.slices[d];
    pthread_mutex_lock(&s->lock);
    struct gp_extent ext;
    int err = gp_alloc_find(s->alloc, addr, &ext) ? -EFAULT : 0;
    if (!err && (len > ext.size || addr - ext.addr > ext.size - len))
        err = -EFAULT;
    uint64_t cs = pool.cfg.chunk_size, off = addr - s->base;
    for (size_t i = off / cs; !err && i <= (off + len - 1) / cs; i++)
        err = s->chunks[i].mapped ? fn(s->chunks[i].handle, arg) : -EFAULT;
    pthread_mutex_unlock(&s->lock);
    *device = d;
    *first = s->base + off / cs * cs;
    return err;
}

struct list_ctx {
    int device;
    struct gp_pool_entry *out;
    uint32_t max, count;
    uint64_t next;
    bool full;
};

static int list_one(const struct gp_extent *e, void *arg)
{
    struct list_ctx *lc = arg;
    if (lc->count == lc->max) {
        lc->full = true;
        return 1;
    }
    lc->out[lc->count++] = (struct gp_pool_entry){ lc->device, e->addr, e->size };
    lc->next = e->addr + e->size;
    return 0;
}

int gp_pool_list(uint64_t start, struct gp_pool_entry *out, uint32_t max, uint32_t *count, uint64_t *next_addr,
                 bool *more)
{
    *count = 0;
    *more = false;
    *next_addr = start;
    if (!gp_pool_active())
        return 0;
    struct list_ctx lc = { .out = out, .max = max, .next = start };
    for (int d = 0; d < pool.cfg.device_count && !lc.full; d++) {
        struct slice *s = &pool.slices[d];
        uint64_t end = s->base + pool.cfg.slice_size;
        if (start >= end)
            continue;
        lc.device = d;
        pthread_mutex_lock(&s->lock);
        gp_alloc_foreach_in(s->alloc, start > s->base ? start : s->base, end, list_one, &lc);
        pthread_mutex_unlock(&s->lock);
    }
    *count = lc.count;
    *next_addr = lc.next;
    *more = lc.full;
    return 0;
}

bool gp_pool_range_is_live(int device, uint64_t addr, uint64_t len)
{
    struct gp_extent e;
    int d;
    if (!len || addr + len < addr || gp_pool_find(addr, &e, &d) || d != device)
        return false;
    return addr + len <= e.addr + e.size;
}

bool gp_pool_range_is_mapped(int device, uint64_t addr, uint64_t len)
{
    if (!gp_pool_active() || device < 0 || device >= pool.cfg.device_count)
        return false;
    struct slice *s = &pool.slices[device];
    if (!len || addr < s->base || addr + len < addr || addr + len > s->base + pool.cfg.slice_size)
        return false;
    uint64_t cs = pool.cfg.chunk_size, off = addr - s->base;
    bool mapped = true;
    pthread_mutex_lock(&s->lock);
    for (size_t i = off / cs; i <= (off + len - 1) / cs && mapped; i++)
        mapped = s->chunks[i].mapped;
    pthread_mutex_unlock(&s->lock);
    return mapped;
}

void gp_pool_keep_mapped(bool keep)
{
    if (!gp_pool_active())
        return;
    /* Every slice lock is taken, so no free is between its check of the
     * count and its unmaps. */
    for (int d = 0; d < pool.cfg.device_count; d++)
        pthread_mutex_lock(&pool.slices[d].lock);
    pool.keep_mapped += keep ? 1 : -1;
    bool trim = pool.keep_mapped == 0;
    for (int d = 0; d < pool.cfg.device_count; d++)
        pthread_mutex_unlock(&pool.slices[d].lock);
    if (!trim)
        return;
    /* The frees made meanwhile: their empty chunks go now. */
    for (int d = 0; d < pool.cfg.device_count; d++) {
        struct slice *s = &pool.slices[d];
        pthread_mutex_lock(&s->lock);
        if (!pool.keep_mapped)
            trim_chunks(s, s->base, pool.cfg.slice_size);
        pthread_mutex_unlock(&s->lock);
    }
}

void gp_pool_usage(int device, struct gp_pool_device_usage *out)
{
    memset(out, 0, sizeof(*out));
    if (!gp_pool_active() || device < 0 || device >= pool.cfg.device_count)
        return;
    struct slice *s = &pool.slices[device];
    struct gp_alloc_stats st;
    pthread_mutex_lock(&s->lock);
    gp_alloc_stats(s->alloc, &st);
    out->bytes_mapped = s->bytes_mapped;
    pthread_mutex_unlock(&s->lock);
    out->bytes_in_use = st.bytes_in_use;
    out->allocations = st.count;
}

int gp_pool_release_all(uint64_t *bytes_released)
{
    int err = 0;
    *bytes_released = 0;
    for (int d = 0; gp_pool_active() && d < pool.cfg.device_count; d++) {
        struct slice *s = &pool.slices[d];
        pthread_mutex_lock(&s->lock);
        uint64_t before = s->bytes_mapped;
        for (size_t i = 0; i < s->chunk_count; i++)
            if (s->chunks[i].mapped && unmap_chunk(s, i))
                err = -EIO;
        *bytes_released += before - s->bytes_mapped;
        pthread_mutex_unlock(&s->lock);
    }
    return err;
}

int gp_pool_remap_all_from(gp_chunk_source source, void *arg, uint64_t *bytes_mapped, CUresult *cu_err)
{
    int err = 0;
    *bytes_mapped = 0;
    for (int d = 0; gp_pool_active() && d < pool.cfg.device_count && !err; d++) {
        struct slice *s = &pool.slices[d];
        pthread_mutex_lock(&s->lock);
        size_t k = 0; /* index among the chunks in use */
        for (size_t i = 0; i < s->chunk_count && !err; i++) {
            if (!s->chunks[i].used)
                continue;
            if (!s->chunks[i].mapped) {
                CUmemGenericAllocationHandle handle;
                err = source ? source(d, k, chunk_addr(s, i), &handle, arg, cu_err) : GP_CHUNK_FRESH;
                if (err == GP_CHUNK_FRESH)
                    err = map_chunk(s, i, cu_err);
                else if (!err)
                    err = map_chunk_handle(s, i, handle, cu_err);
            }
            k++;
        }
        *bytes_mapped += s->bytes_mapped;
        pthread_mutex_unlock(&s->lock);
    }
    if (err) {
        uint64_t released;
        gp_pool_release_all(&released);
        *bytes_mapped = 0;
    }
    return err;
}

int gp_pool_remap_all(uint64_t *bytes_mapped, CUresult *cu_err)
{
    return gp_pool_remap_all_from(NULL, NULL, bytes_mapped, cu_err);
}

size_t gp_pool_chunks_in_use(int device, uint64_t *addrs, size_t max)
{
    if (!gp_pool_active() || device < 0 || device >= pool.cfg.device_count)
        return 0;
    struct slice *s = &pool.slices[device];
    size_t n = 0;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->chunk_count; i++) {
        if (!s->chunks[i].used)
            continue;
        if (n < max)
            addrs[n] = chunk_addr(s, i);
        n++;
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

bool gp_pool_chunks_used(int device, uint64_t addr, uint64_t count)
{
    if (!gp_pool_active() || device < 0 || device >= pool.cfg.device_count)
        return false;
    struct slice *s = &pool.slices[device];
    uint64_t cs = pool.cfg.chunk_size;
    if (addr < s->base || (addr - s->base) % cs || !count)
        return false;
    uint64_t first = (addr - s->base) / cs;
    if (first >= s->chunk_count || count > s->chunk_count - first)
        return false;
    pthread_mutex_lock(&s->lock);
    bool used = true;
    for (uint64_t i = first; used && i < first + count; i++)
        used = s->chunks[i].used > 0;
    pthread_mutex_unlock(&s->lock);
    return used;
}

uint64_t gp_pool_free_mapped(int device)
{
    struct gp_pool_device_usage u;
    gp_pool_usage(device, &u);
    return u.bytes_mapped > u.bytes_in_use ? u.bytes_mapped - u.bytes_in_use : 0;
}
