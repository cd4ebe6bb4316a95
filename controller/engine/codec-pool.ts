/**
 * A pool of worker threads that compress and decompress frames in parallel,
 * so the event loop only schedules and writes. Each worker maps the staging
 * memfd once; tasks name offsets in it (or, for CRIU's files, a path).
 */
import { availableParallelism } from 'node:os';
import { ownBuffer, WorkerPool } from '../base/worker-pool.js';
import { faultPoint } from '../base/faults.js';
import type { Planes, PlanesMode } from '../image/byte-planes.js';
import type { FrameSource } from '../image/file-range.js';
import { native } from '../../native/index.js';
import { log } from '../base/log.js';
import type { DropTask, ZeroDrop } from './criu-zero-pages.js';

export type CodecTask =
  | { id: number; op: 'map'; base: bigint; size: number }
  | { id: number; op: 'cancelFlag'; cancelled: Int32Array }
  | { id: number; op: 'compress'; offset: number; length: number; level: number; planes: PlanesMode }
  | { id: number; op: 'decompress'; src: FrameSource; offset: number; length: number; what: string; planes?: 2 | 4 }
  | { id: number; op: 'verify'; compressed: ArrayBuffer; length: number; what: string; keep?: number[] }
  | { id: number; op: 'digest'; offset: number; length: number; blockSize: number }
  | { id: number; op: 'compressFile'; path: string; offset: number; length: number; level: number }
  | { id: number; op: 'decompressToFile'; src: string; srcOffset: number; srcLength: number; dst: string; dstOffset: number; length: number; what: string; keep?: number[] }
  | { id: number; op: 'planZeroDrop'; dir: string; task: DropTask };

export interface CodecReply {
  id: number;
  data?: ArrayBuffer;
  /** compress, compressFile: the frame is data's first length bytes (the rest is zstd's bound left over). */
  length?: number;
  /** compress: the layout the frame was compressed in. */
  planes?: Planes;
  /** compressFile: the frame's runs of all-zero pages, [first, count, ...]. */
  zeroPages?: number[];
  /** compress, decompressToFile: where the worker's time went. */
  spent?: FrameSpent;
  /** planZeroDrop: the file's drop, null where nothing is left out. */
  drop?: ZeroDrop | null;
  error?: { code: string; message: string };
  /** Not run: the pool was closing. */
  cancelled?: boolean;
}

/** A frame's time in a worker (ms), step by step in the order they ran (unpacked: read, decompress and check, write). */
export interface FrameSpent {
  thread: number;
  steps: Record<string, number>;
}

/**
 * Where frames' time went across the workers, for a trace: each step
 * summed, and the least and most a worker was busy, beside wallMs, the
 * time from queueing them to the last one's end. Workers busy far less
 * than wallMs waited (to start, or for their tasks); busy about as long,
 * they were the bound.
 */
export function describeSpent(spent: FrameSpent[], wallMs: number): string {
  const busy = new Map<number, number>();
  const sum = new Map<string, number>();
  for (const f of spent) {
    for (const [step, ms] of Object.entries(f.steps)) {
      sum.set(step, (sum.get(step) ?? 0) + ms);
      busy.set(f.thread, (busy.get(f.thread) ?? 0) + ms);
    }
  }
  const s = (ms: number) => (ms / 1000).toFixed(3);
  const each = busy.size ? [...busy.values()] : [0];
  const steps = [...sum].map(([step, ms]) => `${step} ${s(ms)} s`).join(', ');
  return `${spent.length} frames on ${busy.size} workers in ${s(wallMs)} s: ${steps} in all; each worker busy ${s(Math.min(...each))}-${s(Math.max(...each))} s`;
}

type DistributiveOmit<T, K extends keyof any> = T extends unknown ? Omit<T, K> : never;
type TaskBody = DistributiveOmit<CodecTask, 'id'>;

/** The most workers --workers may ask for. */
export const MAX_WORKERS = 256;

/** A worker count --workers may give: a whole number from 1 to MAX_WORKERS. */
export function isWorkerCount(n: number): boolean {
  return Number.isInteger(n) && n >= 1 && n <= MAX_WORKERS;
}

/** Default: every core but one, which stays for the event loop and I/O. */
export function defaultWorkerCount(): number {
  return Math.max(1, Math.min(32, availableParallelism() - 1));
}

export class CodecPool {
  private readonly pool: WorkerPool<TaskBody, CodecReply>;
  /** Set by close(): workers answer the tasks still queued without running them. */
  private readonly cancelled = new Int32Array(new SharedArrayBuffer(4));
  private closing: Promise<void> | undefined;
  /** The staging the workers see (mapStaging), mapped here. */
  private mapped: bigint | undefined;

  /** workers: that many started, or those taken from another pool (carve). */
  constructor(workers: number | WorkerPool<TaskBody, CodecReply> = defaultWorkerCount()) {
    if (typeof workers === 'number') {
      this.pool = new WorkerPool(new URL('./codec-worker.js', import.meta.url), workers, 'codec', { cancelled: this.cancelled });
      return;
    }
    this.pool = workers;
    // Before any task of this pool (each worker's messages run in order): its close cancels only its own.
    this.pool.each({ op: 'cancelFlag', cancelled: this.cancelled }).catch(() => undefined);
  }

  /** n of its workers as a pool of their own, kept alive while it lives (the rest stay here). */
  carve(n: number): CodecPool {
    const taken = new CodecPool(this.pool.take(n));
    taken.hold(true);
    return taken;
  }

  get size(): number {
    return this.pool.size;
  }

  /** Tasks sent to the workers and not yet answered. */
  get inFlight(): number {
    return this.pool.inFlight;
  }

  /** Idle workers that keep no process alive (unref), or that do again (ref). */
  hold(keepAlive: boolean): void {
    this.pool.hold(keepAlive);
  }

  /**
   * Maps the staging memfds once, for every worker (native mapShared): the
   * mapping staging had before goes once each worker has the new one, the
   * last one when the workers have ended (close).
   */
  async mapStaging(staging: { fds: number[]; fileBytes: number; size: number }): Promise<void> {
    const { fds, fileBytes, size } = staging;
    const base = native().mapShared(fds, fileBytes, size);
    try {
      await this.pool.each({ op: 'map', base, size });
    } catch (e) {
      await native().unmapShared(base);
      throw e;
    }
    // Each worker ran its earlier tasks before the map: none uses the old mapping now.
    const old = this.mapped;
    this.mapped = base;
    if (old !== undefined) await native().unmapShared(old);
  }

  /** A frame of staging [offset, offset+length), the layout it chose (planes: GPUCKPT_SHUFFLE's mode), and where the worker's time went. */
  async compress(offset: number, length: number, level: number, planes: PlanesMode = 'off'): Promise<{ data: Uint8Array; planes: Planes; spent: FrameSpent }> {
    faultPoint('compress');
    const r = await this.pool.run({ op: 'compress', offset, length, level, planes });
    return { data: new Uint8Array(r.data!, 0, r.length), planes: r.planes ?? 0, spent: r.spent! };
  }

  /** Digests of the blocks of staging [offset, offset+length), as the shim's kernel computes them (8 bytes LE each). */
  async digest(offset: number, length: number, blockSize: number): Promise<Buffer> {
    const r = await this.pool.run({ op: 'digest', offset, length, blockSize });
    return Buffer.from(r.data!);
  }

  /** Bytes [offset, offset+length) of a file, compressed as one frame, and its runs of all-zero pages ([first, count, ...], in pages of the frame). */
  async compressFile(path: string, offset: number, length: number, level: number): Promise<{ data: Uint8Array; zeroPages: number[] }> {
    faultPoint('compress');
    const r = await this.pool.run({ op: 'compressFile', path, offset, length, level });
    return { data: new Uint8Array(r.data!, 0, r.length), zeroPages: r.zeroPages ?? [] };
  }

  /**
   * The frame at [srcOffset, +srcLength) of src, checked and written at
   * dstOffset of dst, its zero pages left as holes; with keep, only its
   * [from, to) byte ranges keep, laid end to end, and what it leaves out
   * must be zero pages (IMAGE_DATA_CORRUPT if not). Resolves with where
   * the worker's time went.
   */
  async decompressToFile(src: string, srcOffset: number, srcLength: number, dst: string, dstOffset: number, length: number, what: string, keep?: number[]): Promise<FrameSpent> {
    const r = await this.pool.run({ op: 'decompressToFile', src, srcOffset, srcLength, dst, dstOffset, length, what, ...(keep ? { keep } : {}) });
    return r.spent!;
  }

  /** The frame at src, read by a worker, checked and decompressed into staging [offset, offset+length). */
  async decompressInto(src: FrameSource, offset: number, length: number, what: string, planes?: 2 | 4): Promise<void> {
    await this.pool.run({ op: 'decompress', src, offset, length, what, ...(planes ? { planes } : {}) });
  }

  /** What a restore from dir leaves out of one CRIU pages file (criu-zero-pages.ts planZeroDrop), planned by a worker. */
  async planZeroDrop(dir: string, task: DropTask): Promise<ZeroDrop | undefined> {
    const drop = (await this.pool.run({ op: 'planZeroDrop', dir, task })).drop;
    // Cloned across the thread as a Uint8Array: a Buffer again, as ZeroDrop has it.
    return drop ? { ...drop, pagemap: { name: drop.pagemap.name, bytes: Buffer.from(drop.pagemap.bytes.buffer, drop.pagemap.bytes.byteOffset, drop.pagemap.bytes.byteLength) } } : undefined;
  }

  /** Checks a frame decompresses whole; with keep, that what lies outside its [from, to) byte ranges is zero pages. */
  async verify(compressed: Uint8Array, length: number, what: string, keep?: number[]): Promise<void> {
    const buf = ownBuffer(compressed);
    await this.pool.run({ op: 'verify', compressed: buf, length, what, ...(keep ? { keep } : {}) }, [buf]);
  }

  /**
   * Stops the workers once none is inside zstd (WorkerPool.close). Tasks
   * still queued are cancelled, so this waits for at most one frame per
   * worker. Nobody awaits a task left when the pool closes (the flow that
   * sent it has failed): its promise never settles, as none did when the
   * workers were simply terminated.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      Atomics.store(this.cancelled, 0, 1);
      const t0 = performance.now();
      await this.pool.close();
      const t1 = performance.now();
      const mapped = this.mapped;
      this.mapped = undefined;
      if (mapped !== undefined) await native().unmapShared(mapped);
      log('debug', 'codec', `workers ended in ${((t1 - t0) / 1000).toFixed(3)} s, staging unmapped in ${((performance.now() - t1) / 1000).toFixed(3)} s`);
    })();
    return this.closing;
  }
}

/** Started ahead of the command that will take it (prestartCodecPool). */
let ahead: CodecPool | undefined;

/**
 * Starts workers before the command that needs them has loaded (cli/entry.ts,
 * for a restore and a checkpoint): 31 workers take 0.13-0.17 s to start,
 * most of it loading their modules on their own threads, which then runs
 * beside the CLI's loading instead of inside the pause or before CRIU's
 * pages can be unpacked. Until taken they keep no process alive: a command
 * that fails first exits as it would.
 */
export function prestartCodecPool(workers?: number): void {
  ahead ??= new CodecPool(workers);
  ahead.hold(false);
}

/**
 * A pool of that many workers (default: defaultWorkerCount()): taken from
 * those started ahead while they are as many or more (a job's pool images
 * share them out, memberShares), else started here.
 */
export function codecPool(workers = defaultWorkerCount()): CodecPool {
  const started = ahead;
  const taken = (pool: CodecPool, of: number) => {
    log('debug', 'codec', `${workers} of the ${of} workers started ahead taken`);
    return pool;
  };
  if (started && started.size > workers) {
    try {
      return taken(started.carve(workers), started.size + workers);
    } catch {
      // One of them failed: those left go, and this pool starts afresh.
    }
  }
  ahead = undefined;
  if (started?.size === workers) {
    started.hold(true);
    return taken(started, workers);
  }
  void started?.close();
  return new CodecPool(workers);
}
