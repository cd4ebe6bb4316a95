/**
 * Restore into a running process (`restore SNAP --into PID`): the image's
 * pool data is written back at identical addresses, rolling the process's
 * GPU state back to the checkpoint.
 *
 * Nothing in the process is touched until the image has been verified and
 * its layout matched against the process: every frame is decompressed (zstd
 * checksums) before the pause, and the process's live allocations must be
 * exactly the image's, checked again once the process is paused.
 */
import { GpuckptError, isGpuckptError } from '../base/errors.js';
import { faultPoint } from '../base/faults.js';
import { PhaseClock, type Phases } from '../base/phase-clock.js';
import { ImageReader } from '../image/index.js';
import { ShimSession } from '../adapters/session.js';
import { CodecPool } from '../engine/codec-pool.js';
import { PoolLoader } from '../engine/pool-loader.js';
import { restoreStreamed, type StreamedSummary } from './image-stream.js';
import { formatBytes, hex, round } from '../base/units.js';
import { DEFAULT_LEASE_MS, PoolState, type AllocEntry, type HelloReply } from '../../native/index.js';

export interface RollbackOptions {
  stagingLimit?: bigint;
  workers?: number;
  leaseMs?: number;
  progress?: boolean;
  /** Codec workers started earlier (restoreStreamInto); the caller ends them. */
  codecs?: CodecPool;
  /** Called once every frame is in staging, where the image is read no more (not called when staging cannot hold them all). */
  imageDone?: () => void;
}

export interface RollbackSummary {
  image: string;
  pid: number;
  rawBytes: number;
  seconds: number;
  pauseSeconds: number;
  copySeconds: number;
  copyGBps: number;
  ringMode: boolean;
  /** Where the time went: image (its manifest read), connect, open (allocations matched), load (frames checked, into staging), pause, copy, resume. */
  phases: Phases;
}

export async function restoreInto(imagePath: string, pid: number, opts: RollbackOptions = {}): Promise<RollbackSummary> {
  const t0 = performance.now();
  const clock = new PhaseClock(`restore into ${pid}`, t0);
  const reader = await ImageReader.open(imagePath);
  let session: ShimSession | undefined;
  let loader: PoolLoader | undefined;
  try {
    const m = reader.manifest;
    clock.mark('image');
    session = await ShimSession.open(pid);
    clock.mark('connect');
    checkPoolLayout(m.pool, session.hello, pid);
    checkAllocations(m, await session.listAllocations(), pid);
    clock.mark('open');
    loader = await PoolLoader.prepare(session, reader, opts);
    clock.mark('load');
    if (loader.fits) opts.imageDone?.();

    const pauseStart = performance.now();
    await session.quiesce(opts.leaseMs ?? DEFAULT_LEASE_MS, true);
    let copySeconds = 0;
    try {
      // The process may have changed its allocations since the first look.
      checkAllocations(m, await session.listAllocations(), pid);
    } catch (e) {
      await session.resume().catch(() => undefined); // nothing written yet
      throw e;
    }
    clock.mark('pause');
    try {
      copySeconds = await loader.copyIn(session);
    } catch (e) {
      // Part of the image may be in the pool: the shim keeps the process
      // held rather than let it compute on a mix (and lets it go if no byte
      // was written). Say which.
      session.close();
      throw new GpuckptError(isGpuckptError(e) ? e.code : 'INTERNAL', `${(e as Error).message}; ${await afterCutRollback(pid, reader.path)}`);
    }
    clock.mark('copy');
    faultPoint('reopen');
    await session.resume();
    clock.mark('resume');
    const pauseSeconds = (performance.now() - pauseStart) / 1000;
    const raw = Number(m.data.rawBytes);
    return {
      image: reader.path,
      pid,
      rawBytes: raw,
      seconds: round((performance.now() - t0) / 1000),
      pauseSeconds: round(pauseSeconds, 4),
      copySeconds: round(copySeconds, 4),
      copyGBps: round(raw / 1e9 / Math.max(copySeconds, 1e-9), 2),
      ringMode: !loader.fits,
      phases: clock.phases,
    };
  } finally {
    session?.close();
    await loader?.close();
    await reader.close();
  }
}

/**
 * restore - --into (or --import FILE --into): the image received whole,
 * then written into pid. The codec workers start while the stream comes
 * in: 0.13 s of a 2 GiB restore on a 32-core host, now behind the stream;
 * the received image is removed from the moment its frames are in staging.
 */
export async function restoreStreamInto(source: string, pid: number, opts: RollbackOptions = {}): Promise<RollbackSummary & StreamedSummary> {
  const codecs = new CodecPool(opts.workers);
  try {
    // The workers end beside the received image's removal, not after it.
    const restore = (dir: string, imageDone: () => void) => restoreInto(dir, pid, { ...opts, codecs, imageDone }).finally(() => codecs.close());
    return await restoreStreamed(source, restore);
  } finally {
    await codecs.close();
  }
}

/** What a rollback cut off during its copies left the process in, in words. */
export async function afterCutRollback(pid: number, image: string): Promise<string> {
  try {
    const again = await ShimSession.open(pid);
    try {
      const st = await again.settledStatus((s) => s.poolState === PoolState.HALF_RESTORED || !s.gateClosed);
      if (st?.poolState === PoolState.HALF_RESTORED)
        return `process ${pid} stays paused with part of the image in its pool: run gpuckpt restore ${image} --into ${pid} again (or end it)`;
      return st ? `process ${pid} runs on untouched` : `process ${pid} is still paused (gpuckpt ps)`;
    } finally {
      again.close();
    }
  } catch {
    return `process ${pid} could not be asked how it stands (gpuckpt ps)`;
  }
}

/**
 * The pool the data was taken from (an image's, a held snapshot's: named
 * by what) must be laid out as the process's: same base, same size per
 * device, no device it lacks, and where known the same chunk size.
 */
export function checkPoolLayout(pool: { base: bigint; sliceSize: bigint; deviceCount?: number; chunkSize?: bigint }, hello: HelloReply, pid: number, what = 'image'): void {
  const mismatch = (field: string, theirs: string, proc: string): never => {
    throw new GpuckptError('LAYOUT_MISMATCH', `${what} pool layout does not match process ${pid}: ${field} is ${theirs} in the ${what}, ${proc} in the process`);
  };
  if (pool.base !== hello.poolBase) mismatch('pool base', hex(pool.base), hex(hello.poolBase));
  if (pool.sliceSize !== hello.sliceSize) mismatch('per-device pool size', formatBytes(pool.sliceSize), formatBytes(hello.sliceSize));
  if (pool.deviceCount !== undefined && pool.deviceCount > hello.deviceCount) mismatch('device count', String(pool.deviceCount), String(hello.deviceCount));
  if (pool.chunkSize !== undefined && pool.chunkSize !== hello.chunkSize) mismatch('chunk size', formatBytes(pool.chunkSize), formatBytes(hello.chunkSize));
}

/** The process must hold exactly the image's allocations: same devices, addresses, sizes. */
export function checkAllocations(m: { allocations: readonly AllocEntry[] }, live: AllocEntry[], pid: number): void {
  const key = (a: { device: number; addr: bigint; size: bigint }) => `${a.device}:${a.addr}:${a.size}`;
  const liveKeys = new Set(live.map(key));
  const imageKeys = new Set(m.allocations.map(key));
  const missing = m.allocations.find((a) => !liveKeys.has(key(a)));
  if (missing)
    throw new GpuckptError('LAYOUT_MISMATCH', `image layout does not match process ${pid}: the image's allocation at ${hex(missing.addr)} (${formatBytes(missing.size)}, device ${missing.device}) is not live in the process`);
  const extra = live.find((a) => !imageKeys.has(key(a)));
  if (extra)
    throw new GpuckptError('LAYOUT_MISMATCH', `image layout does not match process ${pid}: the process has an allocation at ${hex(extra.addr)} (${formatBytes(extra.size)}, device ${extra.device}) that the image does not`);
}
