/**
 * A conversation with the shim inside one process: finds its socket,
 * connects, checks the protocol version, and turns every failure into a
 * GpuckptError a user can act on. One request at a time (the shim serves a
 * session in order anyway), so calls are queued here.
 */
import { close as closeFd, existsSync } from 'node:fs';
import { GpuckptError, isGpuckptError, type ErrorCode } from '../base/errors.js';
import { hex } from '../base/units.js';
import { hasShimLoaded, innerPid, processUid } from './processes.js';
import { isAlive } from '../base/pid-alive.js';
import { socketCandidates } from './run-dir.js';
import {
  CopyFlag,
  MAX_COPY_RANGES,
  MessageType,
  native,
  NcclHoldFlag,
  PeerFlag,
  PoolState,
  QuiesceFlag,
  StagingFlag,
  SuspendFlag,
  type AllocEntry,
  type ChunkRun,
  type CopyRange,
  type CopyReply,
  type DeviceInfo,
  type DriverZerosReply,
  type FrameworkReply,
  type HelloReply,
  type Messages,
  type NativeError,
  type NativeSession,
  type NcclReply,
  type NcclTarget,
  type PeerReply,
  type PoolReply,
  type StatusReply,
} from '../../native/index.js';

/** A message's reply as the addon gives it: the table's type, and the fds that came with it. */
type Reply<K extends keyof Messages> = (Messages[K]['reply'] extends undefined ? object : Messages[K]['reply']) & { fds?: number[] };

/** How a request is sent: within timeoutMs; codes: refusals (errno names) the caller handles, as its own error codes; fds: sent along. */
interface SendOptions {
  timeoutMs?: number;
  codes?: Partial<Record<string, ErrorCode>>;
  /** What an errno means for this request, where it differs from the usual reading. */
  reasons?: Record<string, string>;
  fds?: number[];
}

/** NCCL's own calls (init, finalize) wait for every rank: longer than a plain request, and than the shim's own deadline (GPUCKPT_NCCL_TIMEOUT, 120 s). */
const NCCL_TIMEOUT_MS = 180_000;
const NCCL_REASONS = {
  EIO: 'NCCL reported an error',
  ETIMEDOUT: 'NCCL did not finish in time (GPUCKPT_NCCL_TIMEOUT)',
  EBUSY: 'its ranks are not at a common collective boundary',
  EPERM: 'this session does not hold its NCCL calls',
};

/** Most allocations listed per request (GPCK_MAX_LIST_ENTRIES caps it). */
const LIST_PAGE = 4096;
/** A plain request that takes longer than this means the shim is stuck. */
const REQUEST_TIMEOUT_MS = 60_000;

/** Staging memory: the shim's (received over the socket) or this process's (staging-files.ts); the codec workers map it. */
export interface StagingMemory {
  /** The memfds laid end to end, fileBytes each (the last one up to size); none for memory only the shim sees. */
  fds: number[];
  fileBytes: number;
  size: number;
  registerNs: number;
}

/** Closes the staging's memfds in this process (the shim keeps its own). */
export function closeStaging(staging: StagingMemory): void {
  for (const fd of staging.fds) native().closeFd(fd);
  staging.fds = [];
}

/**
 * closeStaging, several files at once on libuv's threads: the kernel frees
 * a memfd's pages when its last fd or mapping goes, about 0.11 s per GB of
 * 4 KiB pages on one thread (16 GiB of staging took 1.4-2.1 s to free
 * after a restore on the H200 hosts).
 */
export async function releaseStaging(staging: StagingMemory): Promise<void> {
  const fds = staging.fds;
  staging.fds = [];
  await Promise.all(fds.map((fd) => new Promise<void>((res) => closeFd(fd, () => res()))));
}

export class ShimSession {
  readonly pid: number;
  readonly hello: HelloReply;
  private readonly conn: NativeSession;
  private queue: Promise<unknown> = Promise.resolve();
  private closed = false;
  /** performance.now() when this session first asked for a pause (the application's downtime starts there). */
  firstPauseAt?: number;

  private constructor(pid: number, conn: NativeSession, hello: HelloReply) {
    this.pid = pid;
    this.conn = conn;
    this.hello = hello;
  }

  /** Locates the control socket of pid and says hello. */
  static async open(pid: number): Promise<ShimSession> {
    if (!isAlive(pid)) throw new GpuckptError('PID_NOT_RUNNING', `process ${pid} is not running`);
    const uid = processUid(pid);
    const myUid = process.getuid?.() ?? 0;
    const path = socketCandidates(pid).find((p) => existsSync(p));
    if (!path) {
      if (uid !== undefined && uid !== myUid)
        throw new GpuckptError('PEER_REFUSED', `process ${pid} belongs to uid ${uid}; gpuckpt controls only your own processes`);
      if (hasShimLoaded(pid))
        throw new GpuckptError('NOT_UNDER_GPUCKPT', `process ${pid} runs under gpuckpt but has not started CUDA yet (no control socket)`);
      throw new GpuckptError('NOT_UNDER_GPUCKPT', `process ${pid} is not running under gpuckpt (start it with: gpuckpt run -- PROGRAM)`);
    }
    let conn: NativeSession;
    try {
      conn = new (native().Session)(path);
    } catch (e) {
      const err = e as NativeError;
      if (err.code === 'EACCES' || err.code === 'EPERM')
        throw new GpuckptError('PEER_REFUSED', `process ${pid}'s control socket is not yours (${path})`);
      if (err.code === 'ECONNREFUSED' || err.code === 'ENOENT')
        throw new GpuckptError('NOT_UNDER_GPUCKPT', `process ${pid} is not running under gpuckpt (stale socket ${path})`);
      throw new GpuckptError('SESSION_CLOSED', `cannot connect to process ${pid}: ${err.message}`);
    }
    let hello: HelloReply;
    try {
      hello = (await conn.request(MessageType.HELLO, {}, REQUEST_TIMEOUT_MS)) as HelloReply;
    } catch (e) {
      conn.close();
      throw mapError(e, pid, 'hello');
    }
    // A socket named by another PID namespace's number (a run directory
    // shared with a container, whose first process names its socket 1)
    // may be another process's: never act on the wrong one. The kernel
    // says who listens on it; the hello, as whom it sees itself.
    const peer = conn.peerPid();
    const owner = peer && peer !== pid ? `process ${peer}` : hello.pid !== (innerPid(pid) ?? pid) ? `${hello.pid} in its own PID namespace` : undefined;
    if (owner) {
      conn.close();
      throw new GpuckptError('NOT_UNDER_GPUCKPT', `process ${pid} is not running under gpuckpt (${path} belongs to another process, ${owner})`);
    }
    return new ShimSession(pid, conn, hello);
  }

  get poolActive(): boolean {
    return this.hello.poolState === PoolState.ACTIVE;
  }

  /** One request of message name (a `what` for errors), queued behind the ones before it. */
  private request<K extends keyof Messages>(name: K, what: string, args?: Messages[K]['request'], opts: SendOptions = {}): Promise<Reply<K>> {
    if (this.closed) return Promise.reject(new GpuckptError('SESSION_CLOSED', `session with process ${this.pid} is closed`));
    const run = async (): Promise<Reply<K>> => {
      try {
        return (await this.conn.request(MessageType[name], args ?? {}, opts.timeoutMs ?? REQUEST_TIMEOUT_MS, opts.fds)) as Reply<K>;
      } catch (e) {
        throw mapError(e, this.pid, what, opts.codes, opts.reasons);
      }
    };
    const p = this.queue.then(run, run);
    this.queue = p.catch(() => undefined);
    return p;
  }

  status(): Promise<StatusReply> {
    return this.request('STATUS', 'status');
  }

  /**
   * The first status that settled accepts, polled every 20 ms for 2 s:
   * the shim settles once it has seen the session before this one go.
   * undefined when none did.
   */
  async settledStatus(settled: (st: StatusReply) => boolean): Promise<StatusReply | undefined> {
    for (let i = 0; i < 100; i++) {
      const st = await this.status();
      if (settled(st)) return st;
      await new Promise((r) => setTimeout(r, 20));
    }
    return undefined;
  }

  async devices(): Promise<DeviceInfo[]> {
    return (await this.request('DEVICES', 'devices')).devices;
  }

  /**
   * Pauses the application's CUDA work; see gpuckpt_protocol.h for the
   * lease. rollback: the pause is for writing an image into the pool
   * (restore --into); cut off before the copy that completes it, the
   * application stays held instead of running on a mix of two states.
   */
  quiesce(leaseMs: number, rollback = false): Promise<{ drainNs: number; syncNs: number }> {
    this.firstPauseAt ??= performance.now();
    return this.request('QUIESCE', 'quiesce', { leaseMs, flags: rollback ? QuiesceFlag.ROLLBACK : 0 }, { timeoutMs: leaseMs + REQUEST_TIMEOUT_MS, codes: { ENOTRECOVERABLE: 'HALF_RESTORED' } });
  }

  resume(): Promise<{ closedNs: number }> {
    return this.request('RESUME', 'resume');
  }

  /**
   * What the application's framework (its in-process hook) holds unused;
   * only while this session holds the application paused.
   */
  frameworkFree(timeoutMs: number): Promise<FrameworkReply> {
    return this.request('FRAMEWORK_FREE', "ask the framework's allocator", { timeoutMs }, { timeoutMs: timeoutMs + REQUEST_TIMEOUT_MS });
  }

  async listAllocations(): Promise<AllocEntry[]> {
    const all: AllocEntry[] = [];
    let start = 0n;
    for (;;) {
      const page = await this.request('LIST_ALLOCS', 'list allocations', { start, max: LIST_PAGE });
      all.push(...page.entries);
      if (!page.more) return all;
      start = page.next;
    }
  }

  /**
   * Asks the shim for size bytes of registered staging memory, shared with
   * this process through memfds laid end to end. kind 'private': memory only
   * the shim sees (no fds), faster to get, for data this process never reads;
   * 'held': the staging memory a suspend kept with the pool's data in it (no
   * fds either: the shim copies it back alone). ready: prepared (faulted in, pinned) before this
   * returns, so a live checkpoint's pause is the DMA alone (the default for
   * shared staging); otherwise prepared while the copies run (suspend and
   * resume: the total counts).
   */
  async mapStaging(size: number, kind: 'shared' | 'private' | 'held' = 'shared', ready = kind === 'shared'): Promise<StagingMemory> {
    const flags = { shared: 0, private: StagingFlag.PRIVATE, held: StagingFlag.HELD }[kind] | (ready ? StagingFlag.READY : 0);
    const rep = await this.request('STAGING_MAP', kind === 'held' ? 'map the held pool data' : 'map staging memory', { size: BigInt(size), flags, files: 0, fileBytes: 0n });
    const staging = { fds: rep.fds ?? [], fileBytes: Number(rep.fileBytes), size: Number(rep.size), registerNs: rep.registerNs };
    const whole = staging.fds.length === rep.files && (rep.files === 0 || staging.fileBytes * rep.files >= staging.size);
    if (!whole || (kind === 'shared' && rep.files === 0)) {
      closeStaging(staging);
      throw new GpuckptError('PROTOCOL_ERROR', `process ${this.pid} sent ${staging.fds.length} of ${rep.files} staging memfds for ${staging.size} bytes`);
    }
    return staging;
  }

  /**
   * Hands staging this process made (staging-files.ts) to the shim, which
   * maps it (this process keeps its fds) and faults in and pins it in the
   * background, each copy waiting for what it uses; unpinned: nothing is
   * pinned and copies go through the shim's bounce ring (see
   * GPCK_STAGING_UNPINNED: the data is in it already, or a suspend's copy
   * out must leave nothing to unpin). ready: prepared before this
   * returns, as mapStaging's. OUT_OF_FDS: the application had no room for
   * the fds; ask for the shim's own instead.
   */
  async giveStaging(staging: StagingMemory, unpinned: boolean, ready = false): Promise<void> {
    const flags = StagingFlag.GIVEN | (unpinned ? StagingFlag.UNPINNED : 0) | (ready ? StagingFlag.READY : 0);
    const rep = await this.request(
      'STAGING_MAP',
      'map staging memory',
      { size: BigInt(staging.size), flags, files: staging.fds.length, fileBytes: BigInt(staging.fileBytes) },
      { codes: { EMFILE: 'OUT_OF_FDS' }, fds: staging.fds },
    );
    staging.registerNs = rep.registerNs;
  }

  /** Frees the staging memory in the application. */
  async unmapStaging(): Promise<void> {
    await this.request('STAGING_UNMAP', 'unmap staging memory');
  }

  /**
   * Digests of ranges of one device by the shim's kernel while the
   * application is held, or in this session's live window (8 bytes LE per block, the ranges' blocks one
   * after the other; 0: all zeros), within MAX_DIGESTS blocks and
   * MAX_DIGEST_RANGES ranges; undefined where the driver will not run the
   * kernel.
   */
  async blockDigests(device: number, ranges: { addr: bigint; length: bigint }[], blockSize: number): Promise<Buffer | undefined> {
    const r = await this.digestRequest('block digests', { device, ranges, blockSize: BigInt(blockSize) });
    if (r && !r.digests) throw new GpuckptError('PROTOCOL_ERROR', `process ${this.pid} sent malformed block digests`);
    return r?.digests;
  }

  /** Has the shim load its digest kernel on device now, outside any pause; false where the driver will not. */
  async loadDigestKernel(device: number): Promise<boolean> {
    return (await this.digestRequest('load the digest kernel', { device, ranges: [], blockSize: 0n })) !== undefined;
  }

  /** A BLOCK_DIGEST request; undefined when the driver will not load or run the kernel. */
  private async digestRequest(what: string, args: Messages['BLOCK_DIGEST']['request']): Promise<Reply<'BLOCK_DIGEST'> | undefined> {
    try {
      return await this.request('BLOCK_DIGEST', what, args, { codes: { ENOSYS: 'NO_DIGEST_KERNEL' } });
    } catch (e) {
      if (isGpuckptError(e, 'NO_DIGEST_KERNEL')) return undefined;
      throw e;
    }
  }

  /** fromMirror: read from the peer mirror (peerMirror), the pool as the last peer hold copied it. */
  copyOut(ranges: CopyRange[], fromMirror = false): Promise<CopyReply> {
    return this.request('COPY_OUT', 'copy out', { ranges, flags: fromMirror ? CopyFlag.FROM_MIRROR : 0 });
  }

  /**
   * Opens (or closes) this session's live window: copies out and digests
   * then run while the application does, and the shim keeps freed pool
   * memory mapped until the window closes (see the protocol header).
   * Closing the session closes it too.
   */
  async liveWindow(open: boolean): Promise<void> {
    await this.request('LIVE_WINDOW', open ? 'open a live window' : 'close the live window', { open });
  }

  /** completes: with these ranges the image's data is all in the pool. */
  copyIn(ranges: CopyRange[], completes = false): Promise<CopyReply> {
    return this.request('COPY_IN', 'copy in', { ranges, flags: completes ? CopyFlag.COMPLETES : 0 });
  }

  /**
   * Sets ranges of the pool to zero on the GPU (GPCK_COPY_ZEROS), before
   * any copy in; completes: nothing is copied in after them.
   */
  async fillZeros(ranges: { device: number; addr: bigint; size: bigint }[], completes = false): Promise<void> {
    for (let k = 0; k < ranges.length; k += MAX_COPY_RANGES) {
      const part = ranges.slice(k, k + MAX_COPY_RANGES).map((r) => ({ device: r.device, addr: r.addr, length: Number(r.size), stagingOffset: 0 }));
      const last = completes && k + MAX_COPY_RANGES >= ranges.length;
      await this.request('COPY_IN', 'zero fill', { ranges: part, flags: CopyFlag.ZEROS | (last ? CopyFlag.COMPLETES : 0) });
    }
  }

  /**
   * Releases the pool's GPU memory; the application stays held (see the
   * protocol header). held: where the data is besides image: in this
   * session's staging memory ('staging'), which the shim keeps, image then
   * describing its layout; or on another GPU ('peer', after peerHold).
   */
  suspendPool(image: string, held?: 'staging' | 'peer'): Promise<PoolReply> {
    const flags = held === 'staging' ? SuspendFlag.HOLD_STAGING : held === 'peer' ? SuspendFlag.HOLD_PEER : 0;
    return this.request('SUSPEND_POOL', 'suspend the pool', { image, flags });
  }

  /** Room in the application for the fds of every chunk in use (see GPCK_PEER_HOLD); OUT_OF_FDS when its hard limit is short. */
  async peerRoom(): Promise<void> {
    await this.request('PEER_HOLD', 'make room for fds in the application', { device: 0, flags: 0, first: 0, runs: [] }, { codes: { EMFILE: 'OUT_OF_FDS' } });
  }

  /**
   * Copies device's chunks in use from first on (one per fd) into the
   * memory behind fds, on another GPU (see GPCK_PEER_HOLD); the shim keeps
   * its copies of the fds, this process still owns its own.
   */
  peerHold(device: number, first: number, fds: number[]): Promise<PeerReply> {
    return this.request('PEER_HOLD', 'copy the pool to another GPU', { device, flags: 0, first, runs: [] }, { codes: { EMFILE: 'OUT_OF_FDS' }, fds });
  }

  /**
   * After the remap of a suspend whose peer hold was dropped: copies the
   * memory behind fds back into device's chunks from first on (see
   * GPCK_PEER_INTO_POOL); completes: the data is then all in.
   */
  peerCopyIn(device: number, first: number, fds: number[], completes: boolean): Promise<PeerReply> {
    return this.request('PEER_HOLD', 'copy the pool back from the GPU', { device, first, flags: PeerFlag.INTO_POOL | (completes ? PeerFlag.COMPLETES : 0), runs: [] }, { fds });
  }

  /**
   * A GPU-held snapshot's copies (see GPCK_PEER_SNAPSHOT): fds[i] is one
   * allocation for runs[i]'s chunks of device. out: copied out of the pool
   * (this session holds the gate); else back in, in a rollback (completes:
   * the data is then all in).
   */
  snapshotCopy(device: number, runs: ChunkRun[], fds: number[], out: boolean, completes = false): Promise<PeerReply> {
    const flags = PeerFlag.SNAPSHOT | (out ? 0 : PeerFlag.INTO_POOL | (completes ? PeerFlag.COMPLETES : 0));
    return this.request('PEER_HOLD', out ? 'copy the pool into the snapshot' : 'copy the snapshot back', { device, first: 0, flags, runs }, {
      fds,
      reasons: { ESTALE: "the pool's chunks in use are not the snapshot's" },
    });
  }

  /**
   * The pool's chunks under [addr, addr + length), exported as fds (the
   * caller's to close; see CHUNK_EXPORT): fd i is the chunk at first + i *
   * chunk size, on device.
   */
  async chunkExport(addr: bigint, length: number): Promise<{ first: bigint; device: number; fds: number[] }> {
    const rep = await this.request('CHUNK_EXPORT', 'export the memory at that address', { addr, length }, {
      reasons: {
        EFAULT: `${hex(addr)} (${length} bytes) is not inside one of its pool's allocations`,
        E2BIG: `${length} bytes span more chunks than one request exports`,
        EBUSY: 'its pool is not running (suspended, or held mid-rollback)',
        EOPNOTSUPP: 'its GPUs cannot export memory as POSIX fds, which a CPU mapping needs',
      },
      codes: { EFAULT: 'BAD_ARGUMENT', E2BIG: 'BAD_ARGUMENT', EBUSY: 'ALREADY_SUSPENDED', EOPNOTSUPP: 'NO_BAR_ROUTE' },
    });
    const fds = rep.fds ?? [];
    if (fds.length !== rep.count) {
      for (const fd of fds) native().closeFd(fd);
      throw new GpuckptError('PROTOCOL_ERROR', `process ${this.pid} passed ${fds.length} fds of ${rep.count} chunks`);
    }
    return { first: rep.first, device: rep.device, fds };
  }

  /** Maps the memory behind fds as device's mirror from first on (see GPCK_PEER_MIRROR), for copyOut(ranges, true); until this session closes. */
  peerMirror(device: number, first: number, fds: number[]): Promise<PeerReply> {
    return this.request('PEER_HOLD', 'map the copy on the GPU', { device, first, flags: PeerFlag.MIRROR, runs: [] }, { fds });
  }

  /**
   * While suspended after dropHeld: the shim takes fds back as the held
   * memory of device's chunks from first on, uncopied (see GPCK_PEER_ADOPT);
   * without fds, room for them.
   */
  peerAdopt(device: number, first: number, fds: number[]): Promise<PeerReply> {
    return this.request('PEER_HOLD', 'hand the copy on the GPU back', { device, first, flags: PeerFlag.ADOPT, runs: [] }, { codes: { EMFILE: 'OUT_OF_FDS' }, fds });
  }

  /** The held data is now saved at image (or kept by this controller): the shim frees its copy. */
  async dropHeld(image: string): Promise<void> {
    await this.request('DROP_HELD', 'free the held pool data', { image, flags: 0 });
  }

  /** Once the driver's checkpoint returned: the shim drops the zero pages of the driver's host copy (GPCK_DRIVER_ZEROS). */
  dropDriverZeros(): Promise<DriverZerosReply> {
    return this.request('DRIVER_ZEROS', "drop the zero pages of the driver's copy");
  }

  /** Maps the pool again after a suspend; this session then holds the application. bytesCopied: see GPCK_SUSPEND_HOLD_PEER. */
  remapPool(): Promise<PoolReply> {
    return this.request('REMAP_POOL', 'map the pool again', undefined, { codes: { ENOMEM: 'GPU_OUT_OF_MEMORY' } });
  }

  /** The process's NCCL communicators and the state of the cut (GPCK_MAX_COMMS in gpuckpt_protocol.h). */
  ncclStatus(): Promise<NcclReply> {
    return this.request('NCCL_STATUS', 'NCCL status');
  }

  /** Holds the cut (no targets), or lets units pass on the communicators below their targets. */
  ncclHold(targets: NcclTarget[] = []): Promise<NcclReply> {
    return this.request('NCCL_HOLD', 'holding NCCL', { flags: 0, targets }, { reasons: { EBUSY: 'another gpuckpt command holds its NCCL calls' } });
  }

  ncclRelease(): Promise<NcclReply> {
    return this.request('NCCL_HOLD', 'letting NCCL go', { flags: NcclHoldFlag.RELEASE, targets: [] }, { reasons: { EBUSY: 'its communicators are torn down (gpuckpt resume makes them again)' } });
  }

  /** Destroys every communicator; the cut must be reached. */
  async ncclTeardown(): Promise<void> {
    await this.request('NCCL_TEARDOWN', 'tearing NCCL down', undefined, { timeoutMs: NCCL_TIMEOUT_MS, codes: { EIO: 'NCCL_FAILED', ETIMEDOUT: 'NCCL_FAILED' }, reasons: NCCL_REASONS });
  }

  async ncclNewId(): Promise<Buffer> {
    return (await this.request('NCCL_NEW_ID', 'a new NCCL unique id', undefined, { codes: { EIO: 'NCCL_FAILED' }, reasons: NCCL_REASONS })).id;
  }

  /** Makes communicator key again with id (its rank 0's new id); every rank at once. */
  async ncclRebuild(key: bigint, id: Buffer): Promise<void> {
    await this.request('NCCL_REBUILD', 'making an NCCL communicator again', { key, id }, { timeoutMs: NCCL_TIMEOUT_MS, codes: { EIO: 'NCCL_FAILED', ETIMEDOUT: 'NCCL_FAILED' }, reasons: NCCL_REASONS });
  }

  /** Closing the socket also makes the shim reopen the gate and drop staging. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.conn.close();
  }
}

function mapError(e: unknown, pid: number, what: string, codes: Partial<Record<string, ErrorCode>> = {}, reasons: Record<string, string> = {}): GpuckptError {
  const err = e as NativeError;
  if (err instanceof GpuckptError) return err;
  const code = err?.code;
  if (code === 'EACCES')
    return new GpuckptError('PEER_REFUSED', `process ${pid} refused the connection: it belongs to another user`);
  if (code === 'EPROTONOSUPPORT')
    return new GpuckptError('PROTOCOL_VERSION', `process ${pid} runs a gpuckpt shim of another protocol version than this controller (${native().protocolVersion}); use the gpuckpt that started it`);
  if (err?.transport) {
    if (!isAlive(pid)) return new GpuckptError('PID_NOT_RUNNING', `process ${pid} exited during ${what}`);
    if (code === 'ETIMEDOUT') return new GpuckptError('SHIM_ERROR', `process ${pid} did not answer ${what} in time`);
    return new GpuckptError('SESSION_CLOSED', `lost the connection to process ${pid} during ${what}: ${err.message}`);
  }
  const reason: Record<string, string> = {
    EBUSY: 'another gpuckpt command is working on it',
    ETIMEDOUT: 'a CUDA call in the application did not return (it may be waiting on another thread)',
    EFAULT: 'a range lies outside the live pool allocations',
    ERANGE: 'a range lies outside the staging memory',
    ENOMEM: 'out of memory',
    EMFILE: 'the application has no room for more open files',
    EIO: 'the CUDA driver reported an error',
    EPERM: 'the application is not paused by this session',
    ENOTRECOVERABLE: 'its pool holds part of an image from a restore --into that was cut off; restore an image into it again (gpuckpt restore IMAGE --into PID)',
  };
  const known = code && (reasons[code] ?? reason[code]);
  // The shim names the driver call that failed and its CUresult.
  const why = known ? (err?.detail ? `${known}: ${err.detail}` : known) : err?.message || String(e);
  return new GpuckptError((code && !err?.transport && codes[code]) || 'SHIM_ERROR', `process ${pid}: ${what} failed: ${why}`);
}
