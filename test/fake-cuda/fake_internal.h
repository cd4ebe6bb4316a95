/* Internal interfaces shared by the files of the fake CUDA driver.
 *
 * The fake is a test double for libcuda.so.1: "device memory" is host memory
 * at the same virtual address, so test programs read and write device
 * pointers directly (that stands in for kernels). See README.md.
 *
 * Rules every file follows:
 *  - Exported functions are exactly the cu* entry points, marked FAKE_EXPORT.
 *    Everything else is hidden (the pragma below), so the build does not
 *    depend on -fvisibility=hidden being on the command line.
 *  - An exported function never calls another exported function: the call
 *    would go through the PLT and land in the LD_PRELOAD shim under test,
 *    which would then see (and count, and gate) calls the program never
 *    made. Shared work lives in static or hidden fake_* helpers.
 *  - Every exported function starts with FAKE_ENTER() (or FAKE_ENTER_NOINIT()
 *    for the few that work before cuInit, FAKE_ENTER_NOWAIT() for the
 *    cuCheckpointProcess* calls): that counts the call, writes the trace
 *    line, waits while the process is checkpoint-locked (opt-in, see
 *    fake_ckpt.c) and applies fault injection. Every one is followed by
 *    FAKE_LOCAL_ALIAS(name) and has a row in fake_proc.c's table.
 *  - One mutex (fake_lock) guards every table; device byte counters and the
 *    primary context reference counts are atomics.
 *  - Internal helpers return 0 or -errno; CUresult appears only at the API.
 */
#ifndef FAKE_CUDA_INTERNAL_H
#define FAKE_CUDA_INTERNAL_H

/* memfd_create, MAP_FIXED_NOREPLACE. This header comes first in every file. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

/* Without this, cuda.h turns cuMemAlloc into cuMemAlloc_v2 and so on; with
 * it, cuda.h declares both the versioned names (which we define) and the
 * legacy ones, and leaves no renaming macros behind. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#pragma GCC visibility push(hidden)

#define FAKE_EXPORT __attribute__((visibility("default")))

/* Follows each exported definition: a hidden alias fake_local_<name> at the
 * same address. cuGetProcAddress hands out these, because a reference to the
 * exported name itself is resolved by the dynamic linker, and an LD_PRELOAD
 * shim that defines the same name would get its own function back (and
 * recurse into itself). References to a hidden alias bind inside this
 * library. */
#define FAKE_LOCAL_ALIAS(name) \
    extern __typeof__(name) fake_local_##name __attribute__((alias(#name), visibility("hidden")));

#define FAKE_MAX_DEVICES 8
#define FAKE_DRIVER_VERSION 13000
/* Minimum and recommended VMM granularity, as on current NVIDIA GPUs. */
#define FAKE_GRANULARITY ((uint64_t)2 << 20)

/* ---- configuration (fake_cuda.c) ---------------------------------------- */

struct fake_config {
    int ndev;               /* FAKE_CUDA_DEVICES, 1..8 (0 with NO_DEVICE) */
    uint64_t mem_bytes;     /* FAKE_CUDA_MEM_MB, per device */
    int no_device;          /* FAKE_CUDA_NO_DEVICE=1 */
    unsigned sync_delay_ms; /* FAKE_CUDA_SYNC_DELAY_MS */
    unsigned init_delay_ms; /* FAKE_CUDA_INIT_DELAY_MS */
    int ckpt_block;         /* FAKE_CUDA_CKPT_BLOCK=1 */
    int dirty_memory;       /* FAKE_CUDA_DIRTY_MEMORY=1: cuMemCreate's memory is not zeroed */
    unsigned driver_copy_mb; /* FAKE_CUDA_DRIVER_COPY_MB */
    char ckpt_dir[1024];    /* FAKE_CUDA_CKPT_DIR or /tmp/fake-cuda-ckpt-<uid>; "" when too long */
};

/* Parsed once, on first use; never changes afterwards. */
const struct fake_config *fake_config(void);

/* fake_enter flags. */
#define FAKE_F_INIT 1   /* CUDA_ERROR_NOT_INITIALIZED before cuInit */
#define FAKE_F_WAIT 2   /* wait while this process is LOCKED/CHECKPOINTED */

/* Call prologue: trace line, checkpoint wait, fault injection, init check.
 * nth is the 1-based number of this call of the function called name.
 * Returns CUDA_SUCCESS to go on, anything else to return at once. */
CUresult fake_enter(const char *name, unsigned long nth, int flags);
/* A line of its own in FAKE_CUDA_TRACE's file, where one is kept. */
void fake_trace(const char *line);

#define FAKE_ENTER_(flags)                                                      \
    do {                                                                        \
        static atomic_ulong fake_calls_;                                        \
        unsigned long fake_nth_ =                                               \
            atomic_fetch_add_explicit(&fake_calls_, 1, memory_order_relaxed) + 1; \
        CUresult fake_r_ = fake_enter(__func__, fake_nth_, (flags));            \
        if (fake_r_ != CUDA_SUCCESS)                                            \
            return fake_r_;                                                     \
    } while (0)
#define FAKE_ENTER() FAKE_ENTER_(FAKE_F_INIT | FAKE_F_WAIT)
#define FAKE_ENTER_NOINIT() FAKE_ENTER_(0)
/* The cuCheckpointProcess* calls: need cuInit, never wait (a controller may
 * be locked itself, and the calls act on another process). */
#define FAKE_ENTER_NOWAIT() FAKE_ENTER_(FAKE_F_INIT)

/* Sleeps FAKE_CUDA_SYNC_DELAY_MS (stream and context synchronize). */
void fake_sync_delay(void);

/* The one lock over every table. Not recursive: *_locked helpers expect it
 * held, the others take it. */
void fake_lock(void);
void fake_unlock(void);

/* Process-wide unique id for CU_POINTER_ATTRIBUTE_BUFFER_ID and friends. */
unsigned long long fake_next_id(void);

/* ---- sorted range sets (fake_ranges.c) ----------------------------------- */

/* A set of disjoint [start, start + size) ranges kept sorted by start, each
 * with a payload. Used for allocations, registrations, reservations,
 * mappings, and (with size 1, the pointer as start) for handle registries. */
struct fake_range {
    uint64_t start;
    uint64_t size;
    void *data;
};

struct fake_rangeset {
    struct fake_range *v;
    size_t n, cap;
};

/* -EEXIST if it overlaps a range already there, -EINVAL for size 0 or
 * wrap-around, -ENOMEM. */
int fake_rs_insert(struct fake_rangeset *s, uint64_t start, uint64_t size, void *data);
/* Index of the range containing addr, or -ENOENT. */
long fake_rs_find(const struct fake_rangeset *s, uint64_t addr);
/* Index of the range starting exactly at start, or -ENOENT. */
long fake_rs_find_start(const struct fake_rangeset *s, uint64_t start);
/* Index of the first range that ends after addr (may be n). */
size_t fake_rs_lower(const struct fake_rangeset *s, uint64_t addr);
/* 1 when some range overlaps [start, start + size), else 0. */
int fake_rs_overlaps(const struct fake_rangeset *s, uint64_t start, uint64_t size);
/* Checks that [start, start + size) is covered by consecutive ranges with no
 * gap; with whole, also that it starts and ends on range boundaries. Gives
 * the first index and the count. -ENOENT otherwise (or for size 0). */
int fake_rs_cover(const struct fake_rangeset *s, uint64_t start, uint64_t size, int whole,
                  size_t *first, size_t *count);
void fake_rs_remove(struct fake_rangeset *s, size_t i);

/* Pointer registries over the same structure. */
int fake_reg_add(struct fake_rangeset *s, const void *p);
int fake_reg_has(const struct fake_rangeset *s, const void *p);
void fake_reg_del(struct fake_rangeset *s, const void *p);

/* ---- devices and contexts (fake_device.c) -------------------------------- */

#define FAKE_CTX_MAGIC 0xfa4ec7c7u

struct fake_ctx {
    uint32_t magic;
    int device;
    int primary;           /* the device's primary context */
    unsigned flags;
    atomic_int dead;       /* created context destroyed */
    unsigned long long id;
    size_t stack_limit;    /* CU_LIMIT_STACK_SIZE; 0 until set: FAKE_DEFAULT_STACK */
};

int fake_dev_valid(CUdevice dev);
/* Charges bytes to a device's memory; -ENOMEM beyond its total. */
int fake_dev_charge(int dev, uint64_t bytes);
void fake_dev_uncharge(int dev, uint64_t bytes);
void fake_dev_meminfo(int dev, uint64_t *free_bytes, uint64_t *total_bytes);

/* The calling thread's current context, checked: CUDA_ERROR_INVALID_CONTEXT
 * with none, CUDA_ERROR_CONTEXT_IS_DESTROYED for a destroyed context or an
 * inactive primary one. */
CUresult fake_ctx_current(struct fake_ctx **out);
/* The primary context object of a device (always exists, maybe inactive). */
struct fake_ctx *fake_ctx_primary(int dev);
/* The local memory every live context reserves for its stacks (the limit
 * times FAKE_STACK_THREADS), which the driver's copy holds as zero pages. */
uint64_t fake_ctx_stack_bytes(void);

/* ---- classic memory (fake_mem.c) ----------------------------------------- */

/* Frees what a context owned (allocations, registrations): called with the
 * lock held when a context is destroyed or its primary refcount hits 0. */
void fake_mem_ctx_gone_locked(struct fake_ctx *ctx);

/* For copies: 1 when [addr, addr + n) lies inside one allocation or one
 * host registration, 0 when it touches none, -EFAULT when it overlaps one
 * but is not inside it. Lock held. */
int fake_mem_check_locked(uint64_t addr, uint64_t n);

/* ---- virtual memory management (fake_vmm.c) ------------------------------ */

/* What the VMM tables know about an address. */
struct fake_vmm_info {
    int reserved;            /* inside a reservation */
    uint64_t resv_start, resv_size;
    int mapped;              /* inside a mapping */
    uint64_t map_start, map_size;
    int device;              /* the mapped handle's device */
    unsigned long long buffer_id;
    unsigned long long handle_types; /* requestedHandleTypes of the handle */
    unsigned access;         /* CUmemAccess_flags last set on the mapping */
};

/* 0 and *info filled when addr is inside a reservation, else -ENOENT. */
int fake_vmm_lookup_locked(uint64_t addr, struct fake_vmm_info *info);
/* For copies: 1 when [addr, addr + n) is covered by mappings that allow
 * prot (PROT_READ or PROT_WRITE), 0 when it touches no reservation,
 * -EFAULT otherwise. Lock held. */
int fake_vmm_check_locked(uint64_t addr, uint64_t n, int prot);

/* ---- streams (fake_stream.c) and the symbol table (fake_proc.c) ---------- */

/* A stream argument: the default streams need a current context, others
 * must be live streams (CUDA_ERROR_INVALID_HANDLE). */
CUresult fake_stream_check(CUstream hStream);

/* ---- process checkpoint (fake_ckpt.c) ------------------------------------- */

/* With FAKE_CUDA_CKPT_BLOCK=1: returns once this process's state file says
 * neither LOCKED nor CHECKPOINTED (at once when there is no file). */
void fake_ckpt_wait(void);
/* With FAKE_CUDA_DRIVER_COPY_MB: the thread that plays the driver's copy. */
void fake_ckpt_copier_start(void);

/* 1 when name is one of the exported cu* functions (to catch typos in
 * FAKE_CUDA_FAIL). */
int fake_proc_is_exported(const char *name);

#pragma GCC visibility pop
#endif
