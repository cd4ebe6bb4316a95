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
import { CodecPool } from './codec-pool.js';
import { GpuckptError } from './errors.js';
import { frameLabel, ImageReader, type FrameRecord, type Manifest } from './image/index.js';
import { Progress } from './progress.js';
import { ShimSession, type StagingMemory } from './session.js';
import { alignUp, batches, stagingBytes } from './staging-plan.js';
import { DEFAULT_LEASE_MS } from './checkpoint.js';
import { Limiter } from './limiter.js';
import { verifyFrames } from './verify-frames.js';
import { formatBytes, hex, round } from './units.js';
import { native, type AllocEntry, type HelloReply } from '../native/index.js';

export interface RollbackOptions {
  stagingLimit?: bigint;
  workers?: number;
  leaseMs?: number;
  progress?: boolean;
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
}

export async function restoreInto(imagePath: string, pid: number, opts: RollbackOptions = {}): Promise<RollbackSummary> {
  const t0 = performance.now();
  const reader = await ImageReader.open(imagePath);
  let session: ShimSession | undefined;
  let codecs: CodecPool | undefined;
  let staging: StagingMemory | undefined;
  try {
    const m = reader.manifest;
    session = await ShimSession.open(pid);
    checkPoolLayout(m, session.hello, pid);
    checkAllocations(m, await session.listAllocations(), pid);

    const raw = m.data.rawBytes;
    const frames = m.data.frames.map((f, index) => ({ ...f, index }));
    staging = await session.mapStaging(stagingBytes(raw, frames.length, opts.stagingLimit));
    codecs = new CodecPool(opts.workers);
    await codecs.mapStaging(staging.fd, staging.size);
    const fits = frames.reduce((s, f) => alignUp(s + f.length), 0) <= staging.size;
    const groups = batches(frames, fits ? Number.MAX_SAFE_INTEGER : staging.size);
    const progress = new Progress(opts.progress);

    // Verify everything before the process is touched. When staging holds
    // all frames, verifying is decompressing into place: nothing is left to
    // do while paused but DMA.
    const placed = fits ? layoutAll(groups) : undefined;
    if (placed) await decompressBatch(reader, codecs, placed.flat(), progress);
    else await verifyFrames(reader, codecs, progress, 'restore');

    const pauseStart = performance.now();
    await session.quiesce(opts.leaseMs ?? DEFAULT_LEASE_MS);
    let copySeconds = 0;
    try {
      checkAllocations(m, await session.listAllocations(), pid);
      for (const group of placed ?? groups) {
        if (!placed) await decompressBatch(reader, codecs, group, progress);
        const c0 = performance.now();
        await session.copyIn(group.map(({ item, offset }) => ({ device: item.device, addr: item.addr, length: item.length, stagingOffset: offset })));
        copySeconds += (performance.now() - c0) / 1000;
      }
    } finally {
      await session.resume().catch(() => undefined);
      progress.done();
    }
    const pauseSeconds = (performance.now() - pauseStart) / 1000;
    return {
      image: reader.path,
      pid,
      rawBytes: Number(raw),
      seconds: round((performance.now() - t0) / 1000),
      pauseSeconds: round(pauseSeconds, 4),
      copySeconds: round(copySeconds, 4),
      copyGBps: round(Number(raw) / 1e9 / Math.max(copySeconds, 1e-9), 2),
      ringMode: !placed,
    };
  } finally {
    session?.close();
    await codecs?.close();
    if (staging) native().closeFd(staging.fd);
    await reader.close();
  }
}

type PlacedFrame = { item: FrameRecord & { index: number }; offset: number };

/** Batches at disjoint offsets, so every frame has its own staging region. */
function layoutAll(groups: PlacedFrame[][]): PlacedFrame[][] {
  let base = 0;
  return groups.map((g) => {
    const placed = g.map((p) => ({ item: p.item, offset: base + p.offset }));
    const last = g[g.length - 1]!;
    base += alignUp(last.offset + last.item.length);
    return placed;
  });
}

async function decompressBatch(reader: ImageReader, codecs: CodecPool, group: PlacedFrame[], progress: Progress): Promise<void> {
  // Bounds the compressed bytes read ahead of the workers.
  const limiter = new Limiter(2 * codecs.size);
  await Promise.all(
    group.map(({ item: f, offset }) =>
      limiter.run(async () => {
        const compressed = await reader.readFrame(f.index);
        await codecs.decompressInto(compressed, offset, f.length, `${reader.path}: ${frameLabel(f, f.index)}`);
        progress.update(`restore: decompressed frame ${f.index + 1} of ${reader.frameCount}`);
      }),
    ),
  );
}

function checkPoolLayout(m: Manifest, hello: HelloReply, pid: number): void {
  const mismatch = (what: string, image: string, proc: string): never => {
    throw new GpuckptError('LAYOUT_MISMATCH', `image pool layout does not match process ${pid}: ${what} is ${image} in the image, ${proc} in the process`);
  };
  if (m.pool.base !== hello.poolBase) mismatch('pool base', hex(m.pool.base), hex(hello.poolBase));
  if (m.pool.sliceSize !== hello.sliceSize) mismatch('per-device pool size', formatBytes(m.pool.sliceSize), formatBytes(hello.sliceSize));
  if (m.pool.deviceCount > hello.deviceCount) mismatch('device count', String(m.pool.deviceCount), String(hello.deviceCount));
}

/** The process must hold exactly the image's allocations: same devices, addresses, sizes. */
function checkAllocations(m: Manifest, live: AllocEntry[], pid: number): void {
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
