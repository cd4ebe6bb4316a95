// The shim <-> controller protocol: the one table. protocol/generate.mjs
// makes from it the C header (protocol/gpuckpt_protocol.h), the addon's
// encode/decode (native/src/protocol_codec.gen.cc) and the TypeScript
// types (native/protocol.gen.ts); `make check` fails when they differ.
//
// Adding a message: a row in MESSAGES (its request and reply structs in
// ITEMS) and its handler, handle_<name> in shim/control/handlers.c; the
// controller calls it by name (ShimSession's request, typed from the
// table), in a method of its own where it wants one.
//
// Fields: [C type, C name, options]. C types: u8 u16 u32 i32 u64, with
// `len` an array (of `of`, a struct, when given), `flex` a flexible array
// member. Options for the codec and the TypeScript types:
//   js       the field's name in JS (default: the C name in camelCase)
//   as       'number' | 'bigint' | 'bool' | 'string' | 'uuid' | 'buffer' |
//            'skip' (default: u64 bigint, others number, char arrays string)
//   group    the JS object the field goes into (several fields, one object)
//   count    (arrays of structs) the field that says how many are valid
//   value    (requests) a C expression sent whatever the JS object says
//   max      (requests, flexible arrays) a limit, and the error beyond it
//   doc      a comment for the C header (and the TypeScript type)

export const VERSION = 17;

export const INTRO = `The shim <-> controller protocol, generated from protocol/messages.mjs
by protocol/generate.mjs: do not edit; change the table. Shared by the
shim (shim/control/) and the node addon (native/).

Transport: a Unix SOCK_SEQPACKET socket at <run dir>/<pid>.sock, mode 0600
in a 0700 directory owned by the user; the shim also refuses any peer whose
uid differs from its own (SO_PEERCRED). SEQPACKET keeps message boundaries
and carries the staging memfds with SCM_RIGHTS.

Every message is one datagram: struct gpck_header, then payload_len bytes.
A reply carries the request's type | GPCK_REPLY, the same seq, and status 0
or -errno. Integers are host byte order (both ends run on one host).
An error reply whose cause was a driver call has GPCK_REPLY_ERROR_TEXT in
its header's flags and, as its payload, a NUL-terminated text naming the
call and its CUresult (at most GPCK_ERROR_TEXT_LEN bytes with the NUL).
Bump VERSION on any layout change; HELLO refuses a mismatch and the version
is written into every image manifest.`;

/** Request types: [NAME, id, request struct or null, reply struct or null, comment, options];
 * options.fds: the request may bring fds (SCM_RIGHTS). The shim serves NAME
 * with handle_<name> in shim/control/handlers.c (messages.gen.h lists them);
 * options.server 'holder': the snapshot holder serves it instead
 * (native/holder/, its own messages.gen.h), on <run dir>/snapshot-holder.sock. */
export const MESSAGES = [
  ['HELLO', 1, 'hello_req', 'hello_rep', ''],
  ['STATUS', 2, null, 'status_rep', ''],
  ['DEVICES', 3, null, 'devices_rep', ''],
  ['QUIESCE', 4, 'quiesce_req', 'quiesce_rep', ''],
  ['RESUME', 5, null, 'resume_rep', ''],
  ['LIST_ALLOCS', 6, 'list_req', 'list_rep', ''],
  ['STAGING_MAP', 7, 'staging_req', 'staging_rep', '[+ memfds] both ways (SCM_RIGHTS)', { fds: true }],
  ['STAGING_UNMAP', 8, null, null, ''],
  ['COPY_OUT', 9, 'copy_req', 'copy_rep', 'pool -> staging'],
  ['COPY_IN', 10, 'copy_req', 'copy_rep', 'staging -> pool'],
  ['SUSPEND_POOL', 11, 'suspend_req', 'pool_rep', "release the pool's memory"],
  ['REMAP_POOL', 12, null, 'pool_rep', 'map it again, take the gate'],
  ['DROP_HELD', 13, 'suspend_req', null, 'the held data is saved elsewhere'],
  ['BLOCK_DIGEST', 14, 'digest_req', 'digest_rep', 'a digest per block of a range'],
  ['LIVE_WINDOW', 15, 'live_req', null, 'copy and digest while the application runs'],
  ['PEER_HOLD', 16, 'peer_req', 'peer_rep', "+ fds: copy pool chunks into another GPU's memory", { fds: true }],
  ['NCCL_STATUS', 17, null, 'nccl_rep', "the process's NCCL communicators and the cut"],
  ['NCCL_HOLD', 18, 'nccl_hold_req', 'nccl_rep', 'hold the cut, raise its targets, or release it'],
  ['NCCL_TEARDOWN', 19, null, null, 'destroy every communicator, at the cut'],
  ['NCCL_NEW_ID', 20, null, 'nccl_id', "a unique id for a communicator's rebuild"],
  ['NCCL_REBUILD', 21, 'nccl_rebuild_req', null, 'make one communicator again'],
  ['FRAMEWORK_FREE', 22, 'framework_req', 'framework_rep', "memory the framework's allocator holds unused, from its in-process hook"],
  ['CHUNK_EXPORT', 23, 'chunk_export_req', 'chunk_export_rep', "+ fds: the pool's chunks under a range, exported (peek, poke)"],
  ['DRIVER_ZEROS', 24, null, 'driver_zeros_rep', "after the driver's checkpoint: drop the zero pages of its host copy"],
  ['HOLD_PUT', 40, 'hold_put_req', 'hold_rep', '+ fds: keep them as part of a snapshot', { fds: true, server: 'holder' }],
  ['HOLD_LIST', 41, null, 'hold_list_rep', 'the snapshots held', { server: 'holder' }],
  ['HOLD_TAKE', 42, 'hold_take_req', 'hold_rep', "copies of a snapshot part's fds", { server: 'holder' }],
  ['HOLD_DROP', 43, 'hold_drop_req', 'hold_rep', 'let snapshots go', { server: 'holder' }],
  ['HOLD_RECLAIM', 44, 'hold_reclaim_req', 'hold_rep', "a GPU's memory is wanted: let its oldest snapshots go", { server: 'holder' }],
];

/** The header, in order: defines, enums, flags, structs, asserts and the message enum (kind 'messages'). */
export const ITEMS = [
  { kind: 'define', name: 'GPCK_PROTOCOL_VERSION', value: `${VERSION}u` },
  { kind: 'define', name: 'GPCK_MAGIC', value: '0x4b435047u', doc: '"GPCK" little-endian' },
  { kind: 'define', name: 'GPCK_REPLY', value: '0x8000u' },
  { kind: 'define', name: 'GPCK_MAX_DEVICES', value: '16u', js: 'maxDevices' },
  { kind: 'define', name: 'GPCK_MAX_MESSAGE', value: '(128u * 1024u)' },
  { kind: 'define', name: 'GPCK_MAX_COPY_RANGES', value: '4000u', doc: '125 KiB of ranges: a pool without its zero blocks is many', js: 'maxCopyRanges' },
  { kind: 'define', name: 'GPCK_MAX_LIST_ENTRIES', value: '4096u', js: 'maxListEntries' },
  { kind: 'define', name: 'GPCK_NAME_LEN', value: '256u' },
  { kind: 'define', name: 'GPCK_PATH_LEN', value: '1024u' },
  { kind: 'define', name: 'GPCK_ERROR_TEXT_LEN', value: '256u' },
  { kind: 'messages' },
  {
    kind: 'struct',
    name: 'header',
    fields: [
      ['u32', 'magic'],
      ['u16', 'version'],
      ['u16', 'type'],
      ['u32', 'seq'],
      ['i32', 'status', { doc: 'replies: 0 or -errno' }],
      ['u32', 'payload_len'],
      ['u32', 'flags', { doc: 'replies: GPCK_REPLY_*; requests: 0' }],
    ],
  },
  { kind: 'flags', ts: 'ReplyFlag', values: [['GPCK_REPLY_ERROR_TEXT', 1]] },
  { kind: 'struct', name: 'hello_req', fields: [['u32', 'client_version', { value: 'GPCK_PROTOCOL_VERSION' }], ['u32', 'reserved']] },
  {
    kind: 'enum',
    name: 'pool_state',
    ts: 'PoolState',
    doc: 'Pool states reported in hello/status.',
    values: [
      ['GPCK_POOL_NOT_YET', 0, 'CUDA initialised, no device memory routed yet'],
      ['GPCK_POOL_ACTIVE', 1, 'the reservation is in place at the fixed base'],
      ['GPCK_POOL_DISABLED', 2, 'could not reserve at the base: pass-through'],
      ['GPCK_POOL_SUSPENDED', 3, 'physical memory released, application held'],
      ['GPCK_POOL_HALF_RESTORED', 4, 'a rollback was cut off midway: the pool holds part of an image, so the application stays held until a rollback (GPCK_QUIESCE_ROLLBACK) completes'],
    ],
  },
  {
    kind: 'struct',
    name: 'hello_rep',
    ts: 'HelloReply',
    fields: [
      ['u32', 'version'],
      ['i32', 'pid'],
      ['u32', 'uid'],
      ['u32', 'device_count'],
      ['u32', 'pool_state', { doc: 'enum gpck_pool_state' }],
      ['u32', 'driver_version', { doc: 'cuDriverGetVersion' }],
      ['u64', 'pool_base'],
      ['u64', 'slice_size', { doc: 'per device: device d owns [base + d*slice, +slice)' }],
      ['u64', 'quantum', { doc: 'allocation granularity and alignment' }],
      ['u64', 'chunk_size', { doc: 'physical mapping unit' }],
    ],
  },
  { kind: 'enum', name: 'gate_state', values: [['GPCK_GATE_OPEN', 0], ['GPCK_GATE_CLOSED', 1]] },
  {
    kind: 'struct',
    name: 'device_usage',
    ts: 'DeviceUsage',
    fields: [
      ['u64', 'bytes_in_use', { doc: 'live pool allocations' }],
      ['u64', 'bytes_mapped', { doc: 'physical memory backing the pool' }],
      ['u64', 'allocations', { as: 'number' }],
      ['u64', 'chunks_in_use', { as: 'number', doc: 'chunks holding live allocations: what a remap maps' }],
    ],
  },
  {
    kind: 'struct',
    name: 'status_rep',
    ts: 'StatusReply',
    fields: [
      ['u32', 'gate_state', { js: 'gateClosed', as: 'bool', doc: 'enum gpck_gate_state' }],
      ['u32', 'pool_state', { doc: 'enum gpck_pool_state' }],
      ['u32', 'device_count', { as: 'skip' }],
      ['u32', 'reserved'],
      ['u64', 'outside_managed', { group: 'outsidePool', js: 'managed', doc: 'cuMemAllocManaged' }],
      ['u64', 'outside_stream_ordered', { group: 'outsidePool', js: 'streamOrdered', doc: 'cuMemAllocAsync / FromPoolAsync' }],
      ['u64', 'outside_host', { group: 'outsidePool', js: 'host', doc: 'cuMemAllocHost / cuMemHostAlloc' }],
      ['u64', 'outside_unrouted', { group: 'outsidePool', js: 'unrouted', doc: 'device memory the pool could not serve' }],
      ['u64', 'gated_calls', { doc: 'driver calls that passed the gate' }],
      ['device_usage', 'devices', { len: 'GPCK_MAX_DEVICES', count: 'device_count' }],
      ['char', 'held_image', { len: 'GPCK_PATH_LEN', doc: "while suspended: where the pool's data is" }],
    ],
  },
  {
    kind: 'struct',
    name: 'device_info',
    ts: 'DeviceInfo',
    fields: [
      ['i32', 'ordinal'],
      ['i32', 'cc_major'],
      ['i32', 'cc_minor'],
      ['u32', 'reserved'],
      ['u64', 'total_memory'],
      ['u8', 'uuid', { len: '16', as: 'uuid' }],
      ['char', 'name', { len: 'GPCK_NAME_LEN' }],
    ],
  },
  { kind: 'struct', name: 'devices_rep', fields: [['u32', 'count', { as: 'skip' }], ['u32', 'reserved'], ['device_info', 'devices', { len: 'GPCK_MAX_DEVICES', count: 'count' }]] },
  {
    kind: 'flags',
    ts: 'QuiesceFlag',
    doc: `GPCK_QUIESCE_ROLLBACK: the pause is for writing an image back into the
running pool (restore --into). Only such a pause may COPY_IN into a
running process, and only it may take a half-restored one. From its
first COPY_IN until one with GPCK_COPY_COMPLETES succeeds, the pool
holds a mix of the image and what was there: a controller lost then (or
a RESUME) leaves the application held (GPCK_POOL_HALF_RESTORED) rather
than running on the mix; lost after it, the application runs on.`,
    values: [['GPCK_QUIESCE_ROLLBACK', 1]],
  },
  {
    kind: 'struct',
    name: 'quiesce_req',
    fields: [
      [
        'u32',
        'lease_ms',
        {
          doc: `If the controller sends nothing for this long while the gate is
closed, the shim reopens it: a hung controller cannot stall the app
for ever. A controller that dies closes the socket, which reopens the
gate at once. 0 = the default (GPCK_DEFAULT_LEASE_MS).`,
        },
      ],
      ['u32', 'flags', { doc: 'GPCK_QUIESCE_*' }],
    ],
  },
  { kind: 'define', name: 'GPCK_DEFAULT_LEASE_MS', value: '30000u', js: 'defaultLeaseMs' },
  { kind: 'struct', name: 'quiesce_rep', fields: [['u64', 'drain_ns', { as: 'number', doc: 'waiting for calls in flight' }], ['u64', 'sync_ns', { as: 'number', doc: 'synchronising every context' }]] },
  { kind: 'struct', name: 'resume_rep', fields: [['u64', 'closed_ns', { as: 'number', doc: 'how long the gate was closed' }]] },
  {
    kind: 'struct',
    name: 'list_req',
    fields: [
      ['u64', 'start_addr', { js: 'start', doc: 'first address to list (resume point)' }],
      ['u32', 'max_entries', { js: 'max', doc: '<= GPCK_MAX_LIST_ENTRIES' }],
      ['u32', 'reserved'],
    ],
  },
  { kind: 'struct', name: 'alloc_entry', ts: 'AllocEntry', fields: [['u32', 'device'], ['u32', 'reserved'], ['u64', 'addr'], ['u64', 'size']] },
  {
    kind: 'struct',
    name: 'list_rep',
    fields: [
      ['u32', 'count', { as: 'skip' }],
      ['u32', 'more', { as: 'bool', doc: '1: call again from next_addr' }],
      ['u64', 'next_addr', { js: 'next' }],
      ['alloc_entry', 'entries', { flex: true, count: 'count', doc: 'count entries' }],
    ],
  },
  {
    kind: 'flags',
    ts: 'StagingFlag',
    doc: `GPCK_STAGING_HELD: pin again the staging memory a suspend kept (size is
ignored; the reply gives it). -ENOENT when none is held.
GPCK_STAGING_PRIVATE: memory only the shim sees (no memfd is sent), for
data that goes back to the GPU without the controller reading it; it
gets huge pages, so it is had several times faster.
GPCK_STAGING_READY: reply only once every byte is faulted in and
pinned. Without it the memory is prepared in the background and each
copy waits for the pieces it uses: that overlaps preparation with the
DMA (suspend, resume), but puts it inside the application's pause (a
live checkpoint wants the pause to be the DMA alone).
GPCK_STAGING_GIVEN: the controller made the memfds (and may have filled
them already: a restore decompresses while CRIU brings the process back,
before there is a shim to ask) and sends them with the request, files of
file_bytes each (the last one up to size), laid end to end. Each must be a
regular file sealed against shrinking (F_SEAL_SHRINK: a file cut short
under the mapping would fault the application), or one that can never be
sealed, unlinked, on a tmpfs (staging on huge pages, which only the fds'
holders reach), and as large as its part.
The shim maps and closes them, and prepares them as its own memfds; the
reply passes none back. An application out of fds gets -EMFILE, its
connection kept: the controller then asks for staging the shim makes.
GPCK_STAGING_UNPINNED, with GPCK_STAGING_GIVEN: the files hold their data
already (a restore decompressed it while CRIU ran), so pinning them could
no longer overlap anything: copies go through the bounce ring (bounce.h)
instead, nothing of the files is pinned. Without it the files are pinned
in the background while the controller fills them, and the DMA runs
straight from them at the link's speed (a rollback's pause).`,
    values: [
      ['GPCK_STAGING_HELD', 1],
      ['GPCK_STAGING_PRIVATE', 2],
      ['GPCK_STAGING_READY', 4],
      ['GPCK_STAGING_GIVEN', 8],
      ['GPCK_STAGING_UNPINNED', 16],
    ],
  },
  {
    kind: 'struct',
    name: 'staging_req',
    fields: [
      ['u64', 'size'],
      ['u32', 'flags', { doc: 'GPCK_STAGING_*' }],
      ['u32', 'files', { doc: 'GPCK_STAGING_GIVEN: memfds sent with it; else 0' }],
      ['u64', 'file_bytes', { doc: 'GPCK_STAGING_GIVEN: bytes of each but the last; else 0' }],
    ],
  },
  {
    kind: 'define',
    name: 'GPCK_MAX_STAGING_FILES',
    value: '250u',
    js: 'maxStagingFiles',
    doc: `Shared staging is several memfds laid end to end, file_bytes each (the
last one shorter), passed in this order: the kernel faults in pages of
one memfd one thread at a time (16 GiB: 2.7 s from 8, 16 or 32 threads,
and 0.46 s as 32 memfds from 32 threads, on an H200 host).
SCM_RIGHTS carries at most 253 fds.`,
  },
  {
    kind: 'struct',
    name: 'staging_rep',
    fields: [
      ['u64', 'size'],
      ['u64', 'register_ns', { as: 'number', doc: 'time to answer: the memory is faulted in and pinned in the background after, and each copy waits for what it uses' }],
      ['u64', 'file_bytes', { doc: 'bytes of each memfd but the last; 0: no memfd passed' }],
      ['u32', 'files', { doc: 'memfds passed with the reply' }],
      ['u32', 'reserved'],
    ],
  },
  {
    kind: 'struct',
    name: 'copy_range',
    ts: 'CopyRange',
    fields: [
      ['u32', 'device'],
      ['u32', 'reserved'],
      ['u64', 'addr', { doc: 'pool address: must lie inside one live allocation' }],
      ['u64', 'length', { as: 'number' }],
      ['u64', 'staging_offset', { as: 'number', doc: 'must lie inside the mapped staging memory' }],
    ],
  },
  {
    kind: 'flags',
    ts: 'CopyFlag',
    doc: `GPCK_COPY_COMPLETES (COPY_IN): with this request the image's data is all
in the pool, so a controller lost afterwards no longer leaves the
application held (rollback) or released again (resume).
GPCK_COPY_ZEROS (COPY_IN only): the ranges are set to zero on the GPU
(at HBM speed) instead of copied: the blocks an image or a suspend found
all zeros (BLOCK_DIGEST 0) never cross the link. Nothing of staging is
read, none need be mapped, and each range's staging_offset must be 0;
the ranges are checked as any copy in's.
GPCK_COPY_FROM_MIRROR (COPY_OUT only): the ranges are read from the
memory a GPCK_PEER_MIRROR mapped (the pool as it was at the last peer
hold) instead of from the pool: each range, in pool addresses, must lie
inside chunks the mirror maps. Allowed while the application runs,
without the gate: nothing writes that memory.`,
    values: [
      ['GPCK_COPY_COMPLETES', 1],
      ['GPCK_COPY_ZEROS', 2],
      ['GPCK_COPY_FROM_MIRROR', 4],
    ],
  },
  {
    kind: 'struct',
    name: 'copy_req',
    fields: [
      ['u32', 'count', { doc: '<= GPCK_MAX_COPY_RANGES' }],
      ['u32', 'flags', { doc: 'GPCK_COPY_*' }],
      ['copy_range', 'ranges', { flex: true, count: 'count', max: ['GPCK_MAX_COPY_RANGES', 'too many ranges in one copy'] }],
    ],
  },
  { kind: 'struct', name: 'copy_rep', fields: [['u64', 'bytes', { as: 'number' }], ['u64', 'ns', { as: 'number' }]] },
  {
    kind: 'define',
    name: 'GPCK_MAX_DIGESTS',
    value: '16000u',
    js: 'maxDigests',
    doc: `Block digests (the shim's GPU kernel, shim/control/block_digest.cu) of up
to GPCK_MAX_DIGEST_RANGES ranges of one device, each 8-byte aligned and
inside one live allocation, while the sender holds the gate: for each
range in order, digests for [addr + i*block_size, min(addr + (i+1) *
block_size, addr + length)); 0 means all zeros. block_size: a multiple of
GPCK_MIN_DIGEST_BLOCK; at most GPCK_MAX_DIGESTS blocks in all. count 0
only loads the kernel, whole (CUDA's lazy loading would load it at its
first launch), so that this is not inside a pause; it needs no gate,
only a process the driver has not frozen (-EPERM while suspended).
-ENOSYS: the driver will not load or run the kernel.`,
  },
  { kind: 'define', name: 'GPCK_MAX_DIGEST_RANGES', value: '1024u', js: 'maxDigestRanges' },
  { kind: 'define', name: 'GPCK_MIN_DIGEST_BLOCK', value: '4096u' },
  { kind: 'struct', name: 'digest_range', fields: [['u64', 'addr'], ['u64', 'length']] },
  {
    kind: 'struct',
    name: 'digest_req',
    fields: [
      ['u32', 'device'],
      ['u32', 'count', { doc: '<= GPCK_MAX_DIGEST_RANGES' }],
      ['u64', 'block_size'],
      ['digest_range', 'ranges', { flex: true, count: 'count', max: ['GPCK_MAX_DIGEST_RANGES', 'too many ranges in one digest request'] }],
    ],
  },
  {
    kind: 'struct',
    name: 'digest_rep',
    fields: [
      ['u64', 'blocks', { as: 'skip' }],
      ['u64', 'ns', { as: 'number' }],
      ['u64', 'digests', { flex: true, count: 'blocks', as: 'buffer', max: ['GPCK_MAX_DIGESTS'], doc: '8 bytes LE per block' }],
    ],
  },
  {
    kind: 'assert',
    doc: 'A full digest reply, and a full copy request, fit in one message (with the header).',
    checks: [
      ['sizeof(struct gpck_header) + sizeof(struct gpck_digest_rep) + GPCK_MAX_DIGESTS * sizeof(uint64_t) <= GPCK_MAX_MESSAGE', 'GPCK_MAX_DIGESTS does not fit a message'],
      ['sizeof(struct gpck_header) + sizeof(struct gpck_copy_req) + GPCK_MAX_COPY_RANGES * sizeof(struct gpck_copy_range) <= GPCK_MAX_MESSAGE', 'GPCK_MAX_COPY_RANGES does not fit a message'],
    ],
  },
  {
    kind: 'struct',
    name: 'live_req',
    doc: `Live window (checkpoint --live): while the sender's window is open,
COPY_OUT and BLOCK_DIGEST need no gate. Their ranges then need only lie
in mapped pool memory, because the application may free what is being read.
So the pool keeps every chunk mapped until the last window closes: a
freed chunk is unmapped at that point. The copies and digests are then
not consistent: the controller compares digests to find the blocks that
changed and copies those again. The final copy is made while it holds the
gate. Open needs a running pool (-EPERM otherwise). While any window is
open, SUSPEND_POOL is refused with -EBUSY. Closing the socket closes the
window.`,
    fields: [
      ['u32', 'open', { as: 'bool', doc: '1: open, 0: close' }],
      ['u32', 'reserved'],
    ],
  },
  {
    kind: 'flags',
    ts: 'SuspendFlag',
    doc: `Suspend: the sender holds the gate and has saved the pool's data (at
image, or in the staging memory with GPCK_SUSPEND_HOLD_STAGING). The
shim releases every chunk's physical memory but keeps the reservation and
every allocation, and keeps the application held: the gate stays closed
across disconnects until a REMAP_POOL and a RESUME.
GPCK_SUSPEND_HOLD_STAGING: the sender's staging memory holds the data;
the shim unpins and unmaps it but keeps its memfd, so the data lives as
long as the application, until GPCK_DROP_HELD or the RESUME.
GPCK_DROP_HELD: while suspended, the data now lies at image (or with
the sender); the held memory, or the held fds of a peer hold, are freed.
GPCK_SUSPEND_HOLD_PEER: GPCK_PEER_HOLD requests put every chunk in use
into memory on other GPUs; the shim keeps their fds (only the fds, so the
driver's checkpoint sees none of it), and the next REMAP_POOL maps that
memory at the chunks' addresses, or copies it there when it lies on
another GPU than the chunk's. -EINVAL (nothing released) while any chunk
in use is not held.`,
    values: [
      ['GPCK_SUSPEND_HOLD_STAGING', 1],
      ['GPCK_SUSPEND_HOLD_PEER', 2],
    ],
  },
  {
    kind: 'struct',
    name: 'suspend_req',
    fields: [
      ['u32', 'flags', { doc: 'GPCK_SUSPEND_*' }],
      ['u32', 'reserved'],
      ['char', 'image', { len: 'GPCK_PATH_LEN', max: ['GPCK_PATH_LEN', 'image path too long'] }],
    ],
  },
  {
    kind: 'struct',
    name: 'pool_rep',
    doc: `Remap: physical memory for every chunk holding live allocations, on the
same device ordinals (after a driver restore onto other GPUs, those
ordinals are the new GPUs). The sender then holds the gate, to copy the
data in and RESUME; after GPCK_SUSPEND_HOLD_PEER the data is in place
already, and the sender only RESUMEs. -ENOMEM: the GPU lacks the memory; the pool stays
released and the application held.`,
    fields: [
      ['u64', 'bytes', { as: 'number' }],
      ['u64', 'ns', { as: 'number' }],
      ['u64', 'bytes_copied', { as: 'number', doc: "remap from peer memory on another GPU than the chunk's" }],
    ],
  },
  {
    kind: 'flags',
    ts: 'PeerFlag',
    doc: `Peer hold (a migrate through NVLink): the controller allocates memory of
chunk_size bytes per chunk on the GPU the process moves to and sends one
exported POSIX fd (cuMemExportToShareableHandle) per chunk. The shim
imports them, copies chunks [first, first + count) of device's chunks in
use (address order, GPCK_STATUS counts them) into them device to device,
drops its imports and keeps the fds. Sent by the gate's holder while the
pool runs, in order from first 0 (which starts over); the fds are the
request's (at most GPCK_MAX_STAGING_FILES). Sent without fds first, it
makes room for them: the application's soft RLIMIT_NOFILE is raised up
to its hard limit if the fds of every chunk in use would not fit (and
put back once they are closed); -EMFILE when even the hard limit is too
low, and the controller goes through host memory. A hold that fails in the
shim's copy or its checks drops every held fd (refused before that,
nothing changes: -EPROTO, -EPERM without the gate, -EBUSY with a live
window open, -EMFILE when the fds did not fit); the pool is untouched
either way. A RESUME, a SUSPEND_POOL without GPCK_SUSPEND_HOLD_PEER, or
the holder leaving drops them too.
GPCK_PEER_INTO_POOL: the other way, for a pool remapped after a
suspend whose peer hold was dropped (GPCK_DROP_HELD) while the sender
kept its own copies of the fds (checkpoint --leave-running: CRIU cannot
dump a process holding them). Sent by the holder of the gate after
REMAP_POOL: copies the memory behind fds into chunks [first, first +
count) of the last hold's chunks (the same addresses the pool has again;
-ESTALE otherwise), and keeps no fd. With GPCK_PEER_COMPLETES the data is
all in, as with GPCK_COPY_COMPLETES.
GPCK_PEER_MIRROR: maps the memory behind fds, read only for the shim's
copies out (GPCK_COPY_FROM_MIRROR), at the relative places the last
hold's chunks [first, first + count) had; keeps no fd (the mappings keep
the memory). Any time the pool runs, no gate needed; first 0 starts a new
mirror. The mirror goes when its sender leaves, or at the next hold.
GPCK_PEER_ADOPT: while suspended with no hold (after GPCK_DROP_HELD), the
shim takes the fds back as the hold of the last hold's chunks [first,
first + count), without copying: the sender could not copy them back in
and leaves the process suspended with its data on the GPU, for the next
REMAP_POOL to map. In order from first 0; sent without fds first, it makes
room for them as a hold does. -EBUSY unless suspended.
GPCK_PEER_SNAPSHOT: a GPU-held snapshot (checkpoint --to-gpu). The fd
of runs[i] is one allocation of runs[i].chunks chunks, for the pool's
chunks from runs[i].addr on, each of which must hold live allocations now
(-ESTALE otherwise, before anything is copied). Alone: copies those
chunks out into the fds, by the holder of the gate while the pool runs.
With GPCK_PEER_INTO_POOL: copies them back in, by the holder of the gate
in a rollback (QUIESCE with GPCK_QUIESCE_ROLLBACK); GPCK_PEER_COMPLETES
then as above. Either way the shim keeps no fd, and first is ignored.`,
    values: [
      ['GPCK_PEER_INTO_POOL', 1],
      ['GPCK_PEER_COMPLETES', 2],
      ['GPCK_PEER_MIRROR', 4],
      ['GPCK_PEER_ADOPT', 8],
      ['GPCK_PEER_SNAPSHOT', 16],
    ],
  },
  {
    kind: 'struct',
    name: 'chunk_run',
    ts: 'ChunkRun',
    fields: [
      ['u64', 'addr', { doc: 'the first chunk' }],
      ['u64', 'chunks', { as: 'number', doc: 'adjacent chunks from addr, all in the one allocation behind its fd' }],
    ],
  },
  {
    kind: 'struct',
    name: 'peer_req',
    fields: [
      ['u32', 'device', { doc: "the pool's device ordinal (slice)" }],
      ['u32', 'flags', { doc: '0: hold (above); GPCK_PEER_INTO_POOL, GPCK_PEER_MIRROR or GPCK_PEER_ADOPT' }],
      ['u64', 'first', { as: 'number' }],
      ['u32', 'count', { doc: 'GPCK_PEER_SNAPSHOT: runs given, one per fd; else 0' }],
      ['u32', 'reserved'],
      ['chunk_run', 'runs', { flex: true, count: 'count', max: ['GPCK_MAX_STAGING_FILES', 'more runs than fds one request carries'] }],
    ],
  },
  {
    kind: 'struct',
    name: 'peer_rep',
    fields: [
      ['u64', 'bytes', { as: 'number', doc: 'copied by this request' }],
      ['u64', 'ns', { as: 'number' }],
      ['u64', 'chunks_held', { as: 'number', doc: 'of device, so far' }],
    ],
  },
  {
    kind: 'struct',
    name: 'chunk_export_req',
    doc: `CHUNK_EXPORT: the chunks under [addr, addr + length), which must lie
inside one live allocation (-EFAULT otherwise: outside the pool, or memory
no allocation holds), each exported as a POSIX fd (at most
GPCK_MAX_STAGING_FILES chunks: -E2BIG), so that another process can map
them into the CPU (gpuckpt peek and poke). Any client, no gate: what the
memory holds is the application's business; a poke holds the gate first.`,
    fields: [
      ['u64', 'addr'],
      ['u64', 'length', { as: 'number' }],
    ],
  },
  {
    kind: 'struct',
    name: 'chunk_export_rep',
    fields: [
      ['u64', 'first', { doc: "the first chunk's address: fd i is the chunk at first + i * chunk_size" }],
      ['u32', 'device'],
      ['u32', 'count', { doc: 'fds passed with the reply' }],
    ],
  },
  {
    kind: 'flags',
    ts: 'HoldFlag',
    doc: `GPU-held snapshots (checkpoint --gpu-only --to-gpu): memory on a GPU
holding a copy of a pool's chunks in use, exported as POSIX fds, kept by
the snapshot holder (native/holder/), a small process of its own with no
CUDA context, so that it outlives the controller. A snapshot has parts,
one per GPU its memory is on; each part is its fds in the order of the
chunks they copy (the addresses are in the snapshot's description, beside
the run dir, written by the controller). HOLD_PUT sends a part's fds in
order from first 0, at most GPCK_MAX_STAGING_FILES a request; id 0 on the
first request of the first part makes a new snapshot, whose id the reply
gives; GPCK_HOLD_LAST on the last request of the last part completes it
(only a complete snapshot is listed as such, taken or reclaimed). A
snapshot goes on HOLD_DROP, when its process ends (or its PID names
another process: start_time), or on HOLD_RECLAIM, oldest first, when an
application on its GPU runs out of memory, unless GPCK_HOLD_KEEP made it
(a pool's only copy while CRIU dumps its process: gpu-snapshot.ts), which
only its own process's HOLD_RECLAIM lets go (it runs on its pool). The
holder ends once it holds nothing and no client is connected.`,
    values: [
      ['GPCK_HOLD_LAST', 1],
      ['GPCK_HOLD_KEEP', 2],
    ],
  },
  {
    kind: 'struct',
    name: 'hold_put_req',
    fields: [
      ['u64', 'id', { doc: '0: a new snapshot (first 0 of part 0)' }],
      ['u64', 'start_time', { doc: "field 22 of the process's /proc/PID/stat" }],
      ['u64', 'bytes', { as: 'number', doc: 'of memory behind the fds of this request' }],
      ['u64', 'first', { as: 'number', doc: "the part's fds sent before these" }],
      ['i32', 'pid'],
      ['u32', 'part'],
      ['u32', 'flags', { doc: 'GPCK_HOLD_*' }],
      ['u32', 'reserved'],
      ['u8', 'uuid', { len: '16', as: 'uuid', doc: "the GPU the memory is on; all zeros: host memory (a suspended pool's staging memfds)" }],
    ],
  },
  {
    kind: 'struct',
    name: 'hold_rep',
    fields: [
      ['u64', 'id'],
      ['u64', 'bytes', { as: 'number', doc: 'PUT: held in the part so far; DROP, RECLAIM: let go; TAKE: 0' }],
      ['u32', 'count', { doc: 'PUT: fds in the part so far; TAKE: fds passed; DROP, RECLAIM: snapshots let go' }],
      ['u32', 'reserved'],
    ],
  },
  { kind: 'define', name: 'GPCK_MAX_HOLD_ENTRIES', value: '1024u', js: 'maxHoldEntries' },
  {
    kind: 'flags',
    ts: 'HoldEntryFlag',
    doc: `A held snapshot as HOLD_LIST gives it: complete (GPCK_HOLD_LAST came),
and kept (GPCK_HOLD_KEEP: a pool's only copy, not a user's snapshot).
COMPLETE is bit 0 of what was a boolean, so an older reader still sees it.`,
    values: [
      ['GPCK_HOLD_COMPLETE', 1],
      ['GPCK_HOLD_KEPT', 2],
    ],
  },
  {
    kind: 'struct',
    name: 'hold_entry',
    ts: 'HoldEntry',
    fields: [
      ['u64', 'id'],
      ['u64', 'bytes', { as: 'number' }],
      ['u64', 'created_ms', { as: 'number', doc: 'CLOCK_REALTIME' }],
      ['i32', 'pid'],
      ['u32', 'part'],
      ['u32', 'fds'],
      ['u32', 'flags', { doc: 'GPCK_HOLD_COMPLETE, GPCK_HOLD_KEPT' }],
      ['u8', 'uuid', { len: '16', as: 'uuid' }],
    ],
  },
  {
    kind: 'struct',
    name: 'hold_list_rep',
    fields: [
      ['u32', 'count', { as: 'skip' }],
      ['u32', 'holder_pid'],
      ['hold_entry', 'entries', { flex: true, count: 'count', doc: 'one per part' }],
    ],
  },
  {
    kind: 'assert',
    doc: 'A full list of held snapshots fits one message (with the header).',
    checks: [['sizeof(struct gpck_header) + sizeof(struct gpck_hold_list_rep) + GPCK_MAX_HOLD_ENTRIES * sizeof(struct gpck_hold_entry) <= GPCK_MAX_MESSAGE', 'GPCK_MAX_HOLD_ENTRIES does not fit a message']],
  },
  {
    kind: 'struct',
    name: 'hold_take_req',
    fields: [
      ['u64', 'id'],
      ['u64', 'first', { as: 'number' }],
      ['u32', 'part'],
      ['u32', 'count', { doc: 'at most GPCK_MAX_STAGING_FILES' }],
    ],
  },
  { kind: 'struct', name: 'hold_drop_req', fields: [['u64', 'id', { doc: '0: every snapshot of pid (pid 0: all)' }], ['i32', 'pid'], ['u32', 'reserved']] },
  { kind: 'struct', name: 'hold_reclaim_req', fields: [['u64', 'bytes', { as: 'number' }], ['u8', 'uuid', { len: '16', as: 'uuid' }]] },
  {
    kind: 'define',
    name: 'GPCK_MAX_COMMS',
    value: '64u',
    js: 'maxComms',
    doc: `NCCL (shim/collective/): the communicators of one process that a
status lists, and the targets one hold sets. The cut stops every rank
of a job at the same collective boundary: NCCL_HOLD without targets
makes every unit (a collective or point-to-point call outside a group,
a group, making or ending a communicator) wait before it starts; with
targets, units on a communicator pass while its count of units (ops)
is below its target. The controller raises the targets of every rank
to the highest ops + inflight of any, until all report no unit under
way and ops == target (GPCK_NCCL_REACHED). Then NCCL_TEARDOWN destroys
every communicator; after the checkpoint, each one's rank 0 process
gives an NCCL_NEW_ID, NCCL_REBUILD makes it again on every rank at
once, and NCCL_HOLD with GPCK_NCCL_RELEASE lets the job go on. The
holder leaving releases the cut unless a communicator is torn down:
the job then waits for a controller's rebuild (gpuckpt resume). NCCL_HOLD
-EBUSY: another controller holds it. NCCL_TEARDOWN -EBUSY: the cut is
not reached. NCCL_REBUILD -ENOENT: no such key; -EALREADY: it is up.
Failures of NCCL itself: -EIO with an error text.`,
  },
  {
    kind: 'flags',
    ts: 'CommFlag',
    values: [
      ['GPCK_COMM_DOWN', 1],
      ['GPCK_COMM_MULTI_DEVICE', 2],
    ],
  },
  {
    kind: 'struct',
    name: 'nccl_comm',
    ts: 'NcclComm',
    fields: [
      ['u64', 'key', { doc: 'the same in every process of the communicator' }],
      ['u64', 'ops', { as: 'number', doc: 'units completed on it' }],
      ['u64', 'target', { as: 'number' }],
      ['i32', 'nranks'],
      ['i32', 'rank'],
      ['i32', 'device'],
      ['u32', 'inflight', { doc: 'units under way that will count on it' }],
      ['u32', 'registrations', { doc: 'ncclCommRegister buffers: a rebuild cannot carry them' }],
      ['u32', 'windows', { doc: 'ncclCommWindowRegister windows: likewise' }],
      ['u32', 'custom_ops', { doc: 'ncclRedOpCreatePreMulSum ops: likewise' }],
      ['u32', 'flags', { doc: 'GPCK_COMM_*' }],
    ],
  },
  {
    kind: 'flags',
    ts: 'NcclFlag',
    values: [
      ['GPCK_NCCL_HELD', 1],
      ['GPCK_NCCL_REACHED', 2],
      ['GPCK_NCCL_HELD_BY_SENDER', 4],
    ],
  },
  {
    kind: 'struct',
    name: 'nccl_rep',
    fields: [
      ['u32', 'count', { as: 'skip' }],
      ['u32', 'busy', { doc: 'units under way' }],
      ['u32', 'waiting', { doc: 'threads waiting at the cut' }],
      ['u32', 'flags', { doc: 'GPCK_NCCL_*' }],
      ['u64', 'mem_allocations', { as: 'number', doc: 'ncclMemAlloc blocks outstanding: a rebuild cannot carry them' }],
      ['nccl_comm', 'comms', { len: 'GPCK_MAX_COMMS', count: 'count' }],
    ],
  },
  { kind: 'flags', ts: 'NcclHoldFlag', values: [['GPCK_NCCL_RELEASE', 1]] },
  { kind: 'struct', name: 'nccl_target', fields: [['u64', 'key'], ['u64', 'target', { as: 'number' }]] },
  {
    kind: 'struct',
    name: 'nccl_hold_req',
    fields: [
      ['u32', 'flags', { doc: 'GPCK_NCCL_RELEASE, or 0: hold' }],
      ['u32', 'count'],
      ['nccl_target', 'targets', { flex: true, count: 'count', max: ['GPCK_MAX_COMMS', 'too many targets'] }],
    ],
  },
  { kind: 'struct', name: 'nccl_id', fields: [['u8', 'id', { len: '128', as: 'buffer' }]] },
  { kind: 'struct', name: 'nccl_rebuild_req', fields: [['u64', 'key'], ['u8', 'id', { len: '128', as: 'buffer' }]] },
  {
    kind: 'enum',
    name: 'framework_state',
    ts: 'FrameworkState',
    doc: 'What FRAMEWORK_FREE learnt from the in-process hook (shim/python/).',
    values: [
      ['GPCK_FRAMEWORK_NO_HOOK', 0, 'no hook in this process: nothing to ask'],
      ['GPCK_FRAMEWORK_RANGES', 1, 'ranges hold the memory the framework holds but no tensor uses'],
      ['GPCK_FRAMEWORK_IDLE', 2, 'a hook, but no framework using the GPU in this process'],
      ['GPCK_FRAMEWORK_FAILED', 3, 'the hook could not read the framework consistently: why says why'],
    ],
  },
  { kind: 'define', name: 'GPCK_MAX_FREE_RANGES', value: '8000u', doc: 'the largest ranges first; smaller ones are copied', js: 'maxFreeRanges' },
  { kind: 'struct', name: 'framework_req', fields: [['u32', 'timeout_ms', { doc: 'how long to wait for the hook' }], ['u32', 'reserved']] },
  { kind: 'struct', name: 'free_range', fields: [['u64', 'addr'], ['u64', 'size']] },
  {
    kind: 'struct',
    name: 'framework_rep',
    fields: [
      ['u32', 'state', { doc: 'GPCK_FRAMEWORK_*' }],
      ['u32', 'count', { as: 'skip' }],
      ['char', 'framework', { len: '32', doc: "the framework's name, e.g. PyTorch" }],
      ['char', 'why', { len: 'GPCK_NAME_LEN', doc: 'GPCK_FRAMEWORK_FAILED: the reason, one line' }],
      ['free_range', 'ranges', { flex: true, count: 'count' }],
    ],
  },
  {
    kind: 'struct',
    name: 'driver_zeros_rep',
    ts: 'DriverZerosReply',
    doc: `While suspended, once the driver's checkpoint has returned: the host
memory the driver mapped for its copy of the device state since the
SUSPEND_POOL is scanned and its zero pages dropped, so that CRIU does not
dump them (they read back as zeros for the driver's restore). Nothing
recorded (another driver, GPUCKPT_DRIVER_ZEROS=keep) is 0 mappings.
-EINVAL: not suspended.`,
    fields: [
      ['u32', 'mappings'],
      ['u32', 'reserved', { as: 'skip' }],
      ['u64', 'scanned_bytes', { as: 'number' }],
      ['u64', 'dropped_bytes', { as: 'number' }],
      ['u64', 'ns', { as: 'number' }],
    ],
  },
];
