// Generated from protocol/messages.mjs by protocol/generate.mjs: do not edit.
/* eslint-disable */

export const PROTOCOL_VERSION = 17;

/** Request types (enum gpck_type). */
export const MessageType = {
  HELLO: 1,
  STATUS: 2,
  DEVICES: 3,
  QUIESCE: 4,
  RESUME: 5,
  LIST_ALLOCS: 6,
  STAGING_MAP: 7,
  STAGING_UNMAP: 8,
  COPY_OUT: 9,
  COPY_IN: 10,
  SUSPEND_POOL: 11,
  REMAP_POOL: 12,
  DROP_HELD: 13,
  BLOCK_DIGEST: 14,
  LIVE_WINDOW: 15,
  PEER_HOLD: 16,
  NCCL_STATUS: 17,
  NCCL_HOLD: 18,
  NCCL_TEARDOWN: 19,
  NCCL_NEW_ID: 20,
  NCCL_REBUILD: 21,
  FRAMEWORK_FREE: 22,
  CHUNK_EXPORT: 23,
  DRIVER_ZEROS: 24,
  HOLD_PUT: 40,
  HOLD_LIST: 41,
  HOLD_TAKE: 42,
  HOLD_DROP: 43,
  HOLD_RECLAIM: 44,
} as const;

export const MAX_DEVICES = 16;
export const MAX_COPY_RANGES = 4000;
export const MAX_LIST_ENTRIES = 4096;
export const ReplyFlag = { ERROR_TEXT: 1 } as const;
/** enum gpck_pool_state */
export const PoolState = { NOT_YET: 0, ACTIVE: 1, DISABLED: 2, SUSPENDED: 3, HALF_RESTORED: 4 } as const;
export const QuiesceFlag = { ROLLBACK: 1 } as const;
export const DEFAULT_LEASE_MS = 30000;
export const StagingFlag = { HELD: 1, PRIVATE: 2, READY: 4, GIVEN: 8, UNPINNED: 16 } as const;
export const MAX_STAGING_FILES = 250;
export const CopyFlag = { COMPLETES: 1, ZEROS: 2, FROM_MIRROR: 4 } as const;
export const MAX_DIGESTS = 16000;
export const MAX_DIGEST_RANGES = 1024;
export const SuspendFlag = { HOLD_STAGING: 1, HOLD_PEER: 2 } as const;
export const PeerFlag = { INTO_POOL: 1, COMPLETES: 2, MIRROR: 4, ADOPT: 8, SNAPSHOT: 16 } as const;
export const HoldFlag = { LAST: 1, KEEP: 2 } as const;
export const MAX_HOLD_ENTRIES = 1024;
export const HoldEntryFlag = { COMPLETE: 1, KEPT: 2 } as const;
export const MAX_COMMS = 64;
export const CommFlag = { DOWN: 1, MULTI_DEVICE: 2 } as const;
export const NcclFlag = { HELD: 1, REACHED: 2, HELD_BY_SENDER: 4 } as const;
export const NcclHoldFlag = { RELEASE: 1 } as const;
/** enum gpck_framework_state */
export const FrameworkState = { NO_HOOK: 0, RANGES: 1, IDLE: 2, FAILED: 3 } as const;
export const MAX_FREE_RANGES = 8000;

export interface HelloReply {
  version: number;
  pid: number;
  uid: number;
  deviceCount: number;
  /** enum gpck_pool_state */
  poolState: number;
  /** cuDriverGetVersion */
  driverVersion: number;
  poolBase: bigint;
  /** per device: device d owns [base + d*slice, +slice) */
  sliceSize: bigint;
  /** allocation granularity and alignment */
  quantum: bigint;
  /** physical mapping unit */
  chunkSize: bigint;
}

export interface HelloRequest {
}

export interface DeviceUsage {
  /** live pool allocations */
  bytesInUse: bigint;
  /** physical memory backing the pool */
  bytesMapped: bigint;
  allocations: number;
  /** chunks holding live allocations: what a remap maps */
  chunksInUse: number;
}

export interface StatusReply {
  /** enum gpck_gate_state */
  gateClosed: boolean;
  /** enum gpck_pool_state */
  poolState: number;
  outsidePool: OutsidePool;
  /** driver calls that passed the gate */
  gatedCalls: bigint;
  devices: DeviceUsage[];
  /** while suspended: where the pool's data is */
  heldImage: string;
}

export interface OutsidePool {
  /** cuMemAllocManaged */
  managed: bigint;
  /** cuMemAllocAsync / FromPoolAsync */
  streamOrdered: bigint;
  /** cuMemAllocHost / cuMemHostAlloc */
  host: bigint;
  /** device memory the pool could not serve */
  unrouted: bigint;
}

export interface DeviceInfo {
  ordinal: number;
  ccMajor: number;
  ccMinor: number;
  totalMemory: bigint;
  uuid: string;
  name: string;
}

export interface DevicesReply {
  devices: DeviceInfo[];
}

export interface QuiesceReply {
  /** waiting for calls in flight */
  drainNs: number;
  /** synchronising every context */
  syncNs: number;
}

export interface QuiesceRequest {
  leaseMs: number;
  /** GPCK_QUIESCE_* */
  flags: number;
}

export interface ResumeReply {
  /** how long the gate was closed */
  closedNs: number;
}

export interface AllocEntry {
  device: number;
  addr: bigint;
  size: bigint;
}

export interface ListReply {
  /** 1: call again from next_addr */
  more: boolean;
  next: bigint;
  /** count entries */
  entries: AllocEntry[];
}

export interface ListRequest {
  /** first address to list (resume point) */
  start: bigint;
  /** <= GPCK_MAX_LIST_ENTRIES */
  max: number;
}

export interface StagingReply {
  size: bigint;
  /** time to answer: the memory is faulted in and pinned in the background after, and each copy waits for what it uses */
  registerNs: number;
  /** bytes of each memfd but the last; 0: no memfd passed */
  fileBytes: bigint;
  /** memfds passed with the reply */
  files: number;
}

export interface StagingRequest {
  size: bigint;
  /** GPCK_STAGING_* */
  flags: number;
  /** GPCK_STAGING_GIVEN: memfds sent with it; else 0 */
  files: number;
  /** GPCK_STAGING_GIVEN: bytes of each but the last; else 0 */
  fileBytes: bigint;
}

export interface CopyReply {
  bytes: number;
  ns: number;
}

export interface CopyRange {
  device: number;
  /** pool address: must lie inside one live allocation */
  addr: bigint;
  length: number;
  /** must lie inside the mapped staging memory */
  stagingOffset: number;
}

export interface CopyRequest {
  /** GPCK_COPY_* */
  flags: number;
  ranges: CopyRange[];
}

export interface PoolReply {
  bytes: number;
  ns: number;
  /** remap from peer memory on another GPU than the chunk's */
  bytesCopied: number;
}

export interface SuspendRequest {
  /** GPCK_SUSPEND_* */
  flags: number;
  image: string;
}

export interface DigestReply {
  ns: number;
  /** 8 bytes LE per block */
  digests?: Buffer;
}

export interface DigestRange {
  addr: bigint;
  length: bigint;
}

export interface DigestRequest {
  device: number;
  blockSize: bigint;
  ranges: DigestRange[];
}

export interface LiveRequest {
  /** 1: open, 0: close */
  open: boolean;
}

export interface PeerReply {
  /** copied by this request */
  bytes: number;
  ns: number;
  /** of device, so far */
  chunksHeld: number;
}

export interface ChunkRun {
  /** the first chunk */
  addr: bigint;
  /** adjacent chunks from addr, all in the one allocation behind its fd */
  chunks: number;
}

export interface PeerRequest {
  /** the pool's device ordinal (slice) */
  device: number;
  /** 0: hold (above); GPCK_PEER_INTO_POOL, GPCK_PEER_MIRROR or GPCK_PEER_ADOPT */
  flags: number;
  first: number;
  runs: ChunkRun[];
}

export interface NcclComm {
  /** the same in every process of the communicator */
  key: bigint;
  /** units completed on it */
  ops: number;
  target: number;
  nranks: number;
  rank: number;
  device: number;
  /** units under way that will count on it */
  inflight: number;
  /** ncclCommRegister buffers: a rebuild cannot carry them */
  registrations: number;
  /** ncclCommWindowRegister windows: likewise */
  windows: number;
  /** ncclRedOpCreatePreMulSum ops: likewise */
  customOps: number;
  /** GPCK_COMM_* */
  flags: number;
}

export interface NcclReply {
  /** units under way */
  busy: number;
  /** threads waiting at the cut */
  waiting: number;
  /** GPCK_NCCL_* */
  flags: number;
  /** ncclMemAlloc blocks outstanding: a rebuild cannot carry them */
  memAllocations: number;
  comms: NcclComm[];
}

export interface NcclTarget {
  key: bigint;
  target: number;
}

export interface NcclHoldRequest {
  /** GPCK_NCCL_RELEASE, or 0: hold */
  flags: number;
  targets: NcclTarget[];
}

export interface NcclId {
  id: Buffer;
}

export interface NcclRebuildRequest {
  key: bigint;
  id: Buffer;
}

export interface FreeRange {
  addr: bigint;
  size: bigint;
}

export interface FrameworkReply {
  /** GPCK_FRAMEWORK_* */
  state: number;
  /** the framework's name, e.g. PyTorch */
  framework: string;
  /** GPCK_FRAMEWORK_FAILED: the reason, one line */
  why: string;
  ranges: FreeRange[];
}

export interface FrameworkRequest {
  /** how long to wait for the hook */
  timeoutMs: number;
}

export interface ChunkExportReply {
  /** the first chunk's address: fd i is the chunk at first + i * chunk_size */
  first: bigint;
  device: number;
  /** fds passed with the reply */
  count: number;
}

export interface ChunkExportRequest {
  addr: bigint;
  length: number;
}

export interface DriverZerosReply {
  mappings: number;
  scannedBytes: number;
  droppedBytes: number;
  ns: number;
}

export interface HoldReply {
  id: bigint;
  /** PUT: held in the part so far; DROP, RECLAIM: let go; TAKE: 0 */
  bytes: number;
  /** PUT: fds in the part so far; TAKE: fds passed; DROP, RECLAIM: snapshots let go */
  count: number;
}

export interface HoldPutRequest {
  /** 0: a new snapshot (first 0 of part 0) */
  id: bigint;
  /** field 22 of the process's /proc/PID/stat */
  startTime: bigint;
  /** of memory behind the fds of this request */
  bytes: number;
  /** the part's fds sent before these */
  first: number;
  pid: number;
  part: number;
  /** GPCK_HOLD_* */
  flags: number;
  /** the GPU the memory is on; all zeros: host memory (a suspended pool's staging memfds) */
  uuid: string;
}

export interface HoldEntry {
  id: bigint;
  bytes: number;
  /** CLOCK_REALTIME */
  createdMs: number;
  pid: number;
  part: number;
  fds: number;
  /** GPCK_HOLD_COMPLETE, GPCK_HOLD_KEPT */
  flags: number;
  uuid: string;
}

export interface HoldListReply {
  holderPid: number;
  /** one per part */
  entries: HoldEntry[];
}

export interface HoldTakeRequest {
  id: bigint;
  first: number;
  part: number;
  /** at most GPCK_MAX_STAGING_FILES */
  count: number;
}

export interface HoldDropRequest {
  /** 0: every snapshot of pid (pid 0: all) */
  id: bigint;
  pid: number;
}

export interface HoldReclaimRequest {
  bytes: number;
  uuid: string;
}

/** Each message: what its request takes and its reply gives (undefined: no payload). */
export interface Messages {
  HELLO: { request: HelloRequest; reply: HelloReply };
  STATUS: { request: undefined; reply: StatusReply };
  DEVICES: { request: undefined; reply: DevicesReply };
  QUIESCE: { request: QuiesceRequest; reply: QuiesceReply };
  RESUME: { request: undefined; reply: ResumeReply };
  LIST_ALLOCS: { request: ListRequest; reply: ListReply };
  STAGING_MAP: { request: StagingRequest; reply: StagingReply };
  STAGING_UNMAP: { request: undefined; reply: undefined };
  COPY_OUT: { request: CopyRequest; reply: CopyReply };
  COPY_IN: { request: CopyRequest; reply: CopyReply };
  SUSPEND_POOL: { request: SuspendRequest; reply: PoolReply };
  REMAP_POOL: { request: undefined; reply: PoolReply };
  DROP_HELD: { request: SuspendRequest; reply: undefined };
  BLOCK_DIGEST: { request: DigestRequest; reply: DigestReply };
  LIVE_WINDOW: { request: LiveRequest; reply: undefined };
  PEER_HOLD: { request: PeerRequest; reply: PeerReply };
  NCCL_STATUS: { request: undefined; reply: NcclReply };
  NCCL_HOLD: { request: NcclHoldRequest; reply: NcclReply };
  NCCL_TEARDOWN: { request: undefined; reply: undefined };
  NCCL_NEW_ID: { request: undefined; reply: NcclId };
  NCCL_REBUILD: { request: NcclRebuildRequest; reply: undefined };
  FRAMEWORK_FREE: { request: FrameworkRequest; reply: FrameworkReply };
  CHUNK_EXPORT: { request: ChunkExportRequest; reply: ChunkExportReply };
  DRIVER_ZEROS: { request: undefined; reply: DriverZerosReply };
  HOLD_PUT: { request: HoldPutRequest; reply: HoldReply };
  HOLD_LIST: { request: undefined; reply: HoldListReply };
  HOLD_TAKE: { request: HoldTakeRequest; reply: HoldReply };
  HOLD_DROP: { request: HoldDropRequest; reply: HoldReply };
  HOLD_RECLAIM: { request: HoldReclaimRequest; reply: HoldReply };
}
