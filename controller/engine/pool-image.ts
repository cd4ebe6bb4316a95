/**
 * A pool image: pause the application's CUDA work, copy every live pool
 * allocation by DMA into staging memory, let the application go (or, for
 * a suspend, give the GPU back), and compress and write the image from
 * staging in worker threads.
 *
 * The pause ends as soon as the last byte is in staging. When staging cannot
 * hold everything, its regions are reused as their frames are compressed, and the
 * pause then also covers that compression (reported, never hidden).
 */
import { hostname } from 'node:os';
import { codecPool, type CodecPool, describeSpent, type FrameSpent } from './codec-pool.js';
import { GpuckptError } from '../base/errors.js';
import { log, logEnabled } from '../base/log.js';
import { Limiter } from '../base/limiter.js';
import { PhaseClock, type Phases } from '../base/phase-clock.js';
import { loadDigestKernels, digestAllocations } from './block-digests.js';
import { LiveCopy, liveStagingBytes, type LivePlan, type LiveStats } from './live-copy.js';
import { bytesOf, manifestSha256, openChain, parentBlocks, planBlocks, refuseReplacingChain, samePool, type ParentBlocks, type ZeroBlocks } from '../image/chain.js';
import { DIGEST_BLOCK } from '../image/format.js';
import { planesMode } from '../image/byte-planes.js';
import { withoutUnused } from '../image/unused-ranges.js';
import { askFramework, type FrameworkUse } from './framework-free.js';
import { FORMAT_VERSION, ImageReader, ImageWriter, type AllocationRecord, type FrameRecord, type Manifest, type ParentRecord } from '../image/index.js';
import { commandLine } from '../adapters/processes.js';
import { Progress } from '../base/progress.js';
import { releaseStaging, ShimSession, type StagingMemory } from '../adapters/session.js';
import { compressionStart, type CompressionStart } from './compression-start.js';
import { stagingForShim, suspendThroughBounce } from './staging-files.js';
import { COMPRESSING_COPY_BYTES, MAX_RANGES_PER_COPY, MIN_SKIPPED_ZERO_RUN, packedBytes, splitIntoPieces, StagingRing, stagingForStatus, type Piece, type Placed } from './staging-plan.js';
import { round, seconds } from '../base/units.js';
import { DEFAULT_LEASE_MS, native, PoolState, type AllocEntry } from '../../native/index.js';

export interface CheckpointOptions {
  force?: boolean;
  /** Upper bound on staging memory (default: half of free host memory). */
  stagingLimit?: bigint;
  /** zstd level (1 = fastest). */
  level?: number;
  workers?: number;
  /** How long the application may stay paused without a word from us. */
  leaseMs?: number;
  progress?: boolean;
  /** Written into the manifest; 'process' when a CRIU image joins the pool's. */
  kind?: 'gpu-only' | 'process';
  /**
   * Let the shim prepare staging while the DMA runs instead of before the
   * pause: the pause grows, the total shrinks. For a suspend, whose
   * process stops anyway and waits for the GPU to be free.
   */
  prepareDuringCopy?: boolean;
  /** An image to store only the changes since (incremental image). */
  parent?: string;
  /**
   * Where the image ends up when it is written aside and renamed (a
   * whole-process image): the path the parent chain must not be at.
   */
  finalImage?: string;
  /** Pre-copy while the application runs; the pause copies only what changed since (live-copy.ts). */
  live?: boolean;
  /** The pool was copied on its GPU in an earlier pause (gpu-snapshot.ts): the image is read from that copy, and the application is not paused again. */
  snapshot?: GpuSnapshot;
  /**
   * Told of the image's writer once it is made, with the pool image's
   * directory within the final image ('' for its own, members.ts names a
   * member's): a stream of the image follows its frames (image/stream.ts).
   */
  onWriter?: (writer: ImageWriter, dir: string) => void;
  /**
   * Awaited once the image is set up (staging prepared, workers started),
   * before the pause: a job's ranks are held at their cut only then.
   */
  beforePause?: () => Promise<void>;
  /** Take every byte of the pool, even what the framework holds unused (framework-free.ts). */
  wholePool?: boolean;
  /**
   * Given once the image is committed: the codec workers' end and the
   * staging's release, for the caller to run when it suits it. Run after a
   * suspended shim dropped its mapping, the memory is freed here (on
   * libuv's threads, as the fds close), not in the application's munmap,
   * which a checkpoint's CRIU dump waits for (0.87 s for 6 GB); or, where
   * the snapshot holder keeps the data too (a suspend's handOff), by it.
   */
  closeLater?: (close: () => Promise<void>) => void;
}

/** What the pause of a copy on the GPU took along: the shim's mirror (GPCK_PEER_MIRROR) maps the copy. */
export interface GpuSnapshot {
  allocations: AllocEntry[];
  digests?: Buffer[];
  digestSeconds: number;
  pauseSeconds: number;
  /** What the framework held unused in that pause. */
  framework?: FrameworkUse;
}

export interface CheckpointSummary {
  image: string;
  pid: number;
  allocations: number;
  frames: number;
  rawBytes: number;
  storedBytes: number;
  ratio: number;
  seconds: number;
  pauseSeconds: number;
  copySeconds: number;
  copyGBps: number;
  throughputGBps: number;
  stagingBytes: number;
  ringMode: boolean;
  /** Bytes of live allocations; rawBytes is what was copied and stored (less, with a parent or zeros). */
  poolBytes: number;
  /** Bytes of all-zero blocks: neither copied nor stored (the restore sets them to zero). */
  zeroBytes: number;
  /** What the application's framework held unused, left out (or why the whole pool was taken). */
  framework?: FrameworkUse;
  parent?: string;
  /** Time the digest kernel took inside the pause. */
  digestSeconds: number;
  /** Where the time went: setup (parent, image, workers, staging), precopy (--live), pause, drain (compression and writes after it), commit. */
  phases: Phases;
  /** Setup by step: status, parent (its chain read and checked, beyond the status it overlaps), writer (the image's file), staging (from the shim), workers (staging mapped into the compression workers, once they are up; a suspend's copy does not wait for them), kernel. */
  setupPhases: Phases;
  /** The pause by step: quiesce, allocations, digest, plan, staging (with a parent: sized to the changes), copy, release (absent when the pause was an earlier one's). */
  pausePhases?: Phases;
  /** Commit by step: appends (the last writes and flush), sync (data and manifest), directory, install. */
  commitPhases: Phases;
  /** checkpoint --live: the rounds copied while the application ran, and what the pause copied. */
  live?: LiveStats;
  /**
   * When the image's bytes went to its file: the first frame's write
   * (seconds from the command's start; absent with no frame) and the
   * bytes written when the pause ended (from a copy taken on the GPU in
   * an earlier pause: when the copy from it ended). The rest went between then and
   * commit, so what bounds a small image shows: the disk from the first
   * write on, or what came before it.
   */
  writes: { firstSeconds?: number; atPauseEndBytes: number };
}

/** What staging holds when release() is called. */
export interface Staged {
  /** Every piece is in staging at once (no region was reused): staging and zeros alone can restore the pool. */
  complete: boolean;
  groups: Placed[][];
  /** Set to zero before the groups go back: the all-zero blocks, which staging does not hold. */
  zeroFills: AllocationRecord[];
  zeroBytes: number;
  /** The memory the groups lie in (this process's fds of the shim's memfds). */
  staging: StagingMemory;
}

/**
 * Pauses the process behind session, copies its pool into staging, calls
 * release() once every byte has been through host memory (checkpoint: let
 * the application go; suspend: give the GPU back), and writes the image.
 */
export async function writePoolImage(
  session: ShimSession,
  out: string,
  opts: CheckpointOptions,
  release: (staged: Staged) => Promise<unknown>,
): Promise<CheckpointSummary> {
  const t0 = performance.now();
  const pid = session.pid;
  // Named by process: a job's members trace at once.
  const clock = new PhaseClock(`pool image ${pid}`);
  // Within setup: which of its steps a fixed cost (an incremental image's) comes from.
  const setupClock = new PhaseClock(`pool image set-up ${pid}`);
  let writer: ImageWriter | undefined;
  let codecs: CodecPool | undefined;
  let staging: StagingMemory | undefined;
  let committed = false;
  try {
    // First: the workers boot (tens of ms) while the rest of setup runs,
    // not when staging is first mapped into them, inside the pause; a
    // checkpoint's started with the command (cli/workers-ahead.ts).
    codecs = codecPool(opts.workers);
    if (session.hello.poolState === PoolState.DISABLED)
      throw new GpuckptError('SHIM_ERROR', `process ${pid} runs with its pool disabled (the fixed address range was not available); see its stderr`);
    // The parent's chain is read while the shim answers: neither touches
    // the application (setup.parent is what it took beyond the status).
    const parentRead = opts.parent ? readParent(opts.parent, opts.finalImage ?? out, session) : undefined;
    parentRead?.catch(() => undefined); // awaited below, after the status (which may fail first)
    const [status, devices] = await Promise.all([session.status(), session.devices()]);
    setupClock.mark('status');
    const parent = await parentRead;
    setupClock.mark('parent');
    writer = await ImageWriter.create(out, { force: opts.force });
    opts.onWriter?.(writer, '');
    setupClock.mark('writer');
    const pool = codecs;
    /**
     * Staging from the shim; mapped: its handing to the workers, which may
     * still be booting (tens of ms after the pool is made). Each worker
     * takes the map before any frame sent to it later, so a copy need not
     * wait for them.
     */
    const mapStaging = async (bytes: number, ready: boolean): Promise<MappedStaging> => {
      staging = await stagingForShim(session, bytes, ready, !!opts.prepareDuringCopy && suspendThroughBounce());
      return { staging, mapped: pool.mapStaging(staging) };
    };
    // What the copy's staging waits for when setup did not (copyPacked awaits it).
    let setupMapped = Promise.resolve();
    const mapStagingInSetup = async (bytes: number, ready: boolean, waitForWorkers = true): Promise<void> => {
      const { mapped } = await mapStaging(bytes, ready);
      setupClock.mark('staging');
      if (!waitForWorkers) {
        setupMapped = mapped;
        mapped.catch(() => undefined); // observed by the copy, or moot once setup failed
        return;
      }
      await mapped;
      setupClock.mark('workers');
    };
    // Sized from a status taken before the pause; if the application
    // allocates more meanwhile, the ring absorbs it.
    const most = stagingForStatus(status, opts.stagingLimit).bytes;
    // With a parent, what moves is known only inside the pause. Staging is
    // still prepared before it, as for a full image, so the pause is never
    // the longer one: prepared during the copy, staging took the DMA to
    // about 11 GB/s, and a job changing 43 % of an 11.4 GB pool paused
    // 490 ms where its full image paused 232 ms (issue 26). A suspend's
    // incremental image (the process stops anyway) sizes staging to the
    // changes inside the pause instead: less memory, less time in all.
    // A live checkpoint's staging holds the whole pool at fixed places,
    // prepared while its first round copies.
    // A suspend's copy (prepareDuringCopy: the application does not run on
    // after it) starts while the workers still boot: a 2-rank job's three
    // pools took 0.29-0.32 s to start them, beside its ranks' staging
    // preparation, which the copy then waits for instead.
    if (!opts.live && (!parent || !opts.prepareDuringCopy)) await mapStagingInSetup(most, !opts.prepareDuringCopy, !opts.prepareDuringCopy);
    if (opts.live) await mapStagingInSetup(liveStagingBytes(status, opts.stagingLimit, pid), false);
    const stagingFor = async (bytes: number) => (staging ? { staging, mapped: setupMapped } : mapStaging(Math.max(1 << 20, Math.min(bytes, most)), false));

    // The driver's first compile of the kernel stays out of the pause. (A
    // pool that is not active is refused by the quiesce, in its own words.)
    const kernelLoaded = !opts.snapshot && session.poolActive && (await loadDigestKernels(session, status));
    const needsKernel = parent ? 'no incremental image can be made' : opts.live ? 'checkpoint --live cannot tell what changed' : undefined;
    if (needsKernel && session.poolActive && !kernelLoaded && !opts.snapshot?.digests) throw new GpuckptError('NO_DIGEST_KERNEL', `process ${pid}: the driver will not run the digest kernel (it needs driver 580 or newer), so ${needsKernel}`);
    setupClock.mark('kernel');
    clock.mark('setup');
    const progress = new Progress(opts.progress);
    let live: LiveCopy | undefined;
    if (opts.live && session.poolActive) {
      live = new LiveCopy(session, staging!, codecs, parent?.digests.blockSize ?? DIGEST_BLOCK, progress);
      await live.precopy();
      clock.mark('precopy');
    }
    await opts.beforePause?.();
    const run = await copyAndCompress(session, stagingFor, codecs, writer, opts, release, kernelLoaded, progress, parent, live);
    // Every frame is compressed: the workers end while the image syncs,
    // not after it (31 of them took 0.11-0.2 s to end).
    codecs.close().catch(() => undefined);
    clock.phases.pause = round(run.pauseSeconds, 4);
    clock.mark('drain');
    clock.phases.drain = round(clock.phases.drain! - run.pauseSeconds, 4);
    const outside = status.outsidePool;
    const manifest: Manifest = {
      format: 'gpuckpt-image',
      version: FORMAT_VERSION,
      protocolVersion: native().protocolVersion,
      kind: opts.kind ?? 'gpu-only',
      createdAt: new Date().toISOString(),
      source: { pid, command: commandLine(pid), host: hostname(), uid: process.getuid?.() ?? 0 },
      pool: {
        base: session.hello.poolBase,
        sliceSize: session.hello.sliceSize,
        deviceCount: session.hello.deviceCount,
        quantum: session.hello.quantum,
      },
      devices: devices.map((d) => ({ ordinal: d.ordinal, name: d.name, uuid: d.uuid, totalMemory: d.totalMemory })),
      allocations: run.allocations.map((a) => ({ device: a.device, addr: a.addr, size: a.size })),
      outsidePool: { ...outside },
      data: { file: 'pool.zst', frames: run.frames, rawBytes: run.rawBytes, storedBytes: writer.storedBytes },
      ...(run.digests ? { blocks: { size: run.blockSize, digests: run.digests } } : {}),
      ...(run.framework?.unused.length ? { unused: run.framework.unused } : {}),
      ...(parent ? { parent: parent.record } : {}),
      stats: {
        digestSeconds: run.digestSeconds,
        pauseSeconds: run.pauseSeconds,
        copySeconds: run.copySeconds,
        drainSeconds: run.drainSeconds,
        syncSeconds: run.syncSeconds,
        stagingRegisterSeconds: seconds(run.staging.registerNs),
      },
    };
    // The parent must still be the image the changes were taken against.
    if (parent && !(await manifestSha256(parent.record.path)).equals(parent.record.manifestSha256))
      throw new GpuckptError('IMAGE_CHAIN_BROKEN', `${parent.record.path} was replaced while this checkpoint was made against it; no image written`);
    await writer.commit(manifest);
    clock.mark('commit');
    committed = true;
    const total = (performance.now() - t0) / 1000;
    const raw = Number(run.rawBytes);
    // What the DMA moved in the pause: with --live, only what changed after the pre-copy.
    const pauseCopied = live ? live.stats.pauseBytes : raw;
    return {
      image: writer.path,
      pid,
      allocations: run.allocations.length,
      frames: run.frames.length,
      rawBytes: raw,
      storedBytes: Number(writer.storedBytes),
      ratio: round(raw / Math.max(1, Number(writer.storedBytes)), 2),
      seconds: round(total),
      pauseSeconds: round(run.pauseSeconds, 4),
      copySeconds: round(run.copySeconds, 4),
      copyGBps: round(pauseCopied / 1e9 / Math.max(run.copySeconds, 1e-9), 2),
      throughputGBps: round(raw / 1e9 / total, 2),
      stagingBytes: run.staging.size,
      ringMode: run.ringMode,
      poolBytes: bytesOf(run.allocations),
      zeroBytes: run.zeroBytes,
      ...(run.framework ? { framework: run.framework } : {}),
      ...(parent ? { parent: parent.record.path } : {}),
      digestSeconds: round(run.digestSeconds, 4),
      phases: clock.phases,
      setupPhases: setupClock.phases,
      commitPhases: writer.commitPhases,
      ...(run.pausePhases ? { pausePhases: run.pausePhases } : {}),
      ...(live ? { live: live.stats } : {}),
      writes: {
        ...(run.firstWriteAt !== undefined ? { firstSeconds: round((run.firstWriteAt - t0) / 1000, 4) } : {}),
        atPauseEndBytes: run.storedAtPauseEnd,
      },
    };
  } catch (e) {
    await writer?.abort().catch(() => undefined);
    throw e;
  } finally {
    const close = async () => {
      await codecs?.close();
      clock.mark('workers ended');
      if (staging) await releaseStaging(staging);
      clock.mark('staging released');
    };
    if (committed && opts.closeLater) opts.closeLater(close);
    else await close();
  }
}

/** A parent and its digests (in its blocks: the child's digests are taken in the same blocks, so they compare). */
interface ParentDigests {
  record: ParentRecord;
  digests: ParentBlocks;
}

/**
 * The image a checkpoint --parent stores its changes against: checked
 * before the application is touched (its own chain whole, digests present,
 * the same pool, and neither it nor any of its parents about to be
 * replaced by the new image), and its digests by block address.
 */
export async function readParent(path: string, out: string, session: ShimSession): Promise<ParentDigests> {
  const reader = await ImageReader.open(path);
  const { parents } = await openChain(reader).catch(async (e) => {
    await reader.close();
    throw e;
  });
  try {
    refuseReplacingChain(out, [reader, ...parents]);
    const m = reader.manifest;
    const digests = parentBlocks(m);
    if (!digests) throw new GpuckptError('BAD_ARGUMENT', `${reader.path} has no block digests (the driver could not run the digest kernel when it was made): it cannot be a parent`);
    if (!samePool(m.pool, { base: session.hello.poolBase, sliceSize: session.hello.sliceSize, deviceCount: session.hello.deviceCount }))
      throw new GpuckptError('LAYOUT_MISMATCH', `${reader.path} was made from a pool of another layout than process ${session.pid}'s: it cannot be a parent`);
    return { record: { path: reader.path, manifestSha256: reader.manifestSha256 }, digests };
  } finally {
    await Promise.all([reader, ...parents].map((r) => r.close()));
  }
}

/** Staging, and its mapping into the compression workers (which the copy need not wait for). */
interface MappedStaging {
  staging: StagingMemory;
  mapped: Promise<void>;
}

interface CopyRun {
  staging: StagingMemory;
  allocations: { device: number; addr: bigint; size: bigint }[];
  digests?: Buffer[];
  blockSize: number;
  digestSeconds: number;
  /** Bytes of all-zero blocks, left out of the copy and of the image. */
  zeroBytes: number;
  framework?: FrameworkUse;
  frames: FrameRecord[];
  rawBytes: bigint;
  pauseSeconds: number;
  /** Where the pause went (none when the pause was an earlier one's, from a snapshot). */
  pausePhases?: Phases;
  copySeconds: number;
  drainSeconds: number;
  syncSeconds: number;
  ringMode: boolean;
  /** performance.now() when the first frame was written. */
  firstWriteAt?: number;
  /** Bytes in the image's file once release() returned: the pause's end (from a snapshot, the copy's). */
  storedAtPauseEnd: number;
}

async function copyAndCompress(
  session: ShimSession,
  stagingFor: (bytes: number) => Promise<MappedStaging>,
  codecs: CodecPool,
  writer: ImageWriter,
  opts: CheckpointOptions,
  release: (staged: Staged) => Promise<unknown>,
  kernelLoaded: boolean,
  progress: Progress,
  parent?: ParentDigests,
  live?: LiveCopy,
): Promise<CopyRun> {
  const level = opts.level ?? 1;
  const planesSetting = planesMode(process.env.GPUCKPT_SHUFFLE);
  let ring!: StagingRing;
  let staging!: StagingMemory;
  // Bounds compressed bytes waiting for the disk, and keeps every worker busy.
  const framesInFlight = 2 * codecs.size;
  const limiter = new Limiter(framesInFlight);
  // Compression may have to wait for the copy or release() (compressionStart).
  let allowCompression!: () => void;
  const compressionAllowed = new Promise<void>((r) => (allowCompression = r));
  let start!: CompressionStart;
  const frames: FrameRecord[] = [];
  const compressions: Promise<void>[] = [];
  let firstFailure: unknown;
  let written = 0;
  let firstWriteAt: number | undefined;
  let storedAtPauseEnd = 0;
  // For the trace: what bounds the frames, the workers or the writes.
  const tracing = logEnabled('debug');
  const spent: FrameSpent[] = [];
  let appendMs = 0;
  let firstCompressAt: number | undefined;

  const snapshot = opts.snapshot;
  const pauseStart = performance.now();
  const pauseClock = new PhaseClock(`pool image pause ${session.pid}`);
  const q = snapshot ? { drainNs: 0, syncNs: 0 } : await session.quiesce(opts.leaseMs ?? DEFAULT_LEASE_MS);
  pauseClock.mark('quiesce');
  // True until release() is called: the finally must then let the application go.
  let holding = !snapshot;
  let copySeconds = 0;
  let pauseSeconds = 0;
  let pieces: Piece[] = [];
  /** Bytes of the frames to write: pieces' total (for progress). */
  let toWrite = 0;
  let allocations: CopyRun['allocations'] = [];
  let digests: Buffer[] | undefined;
  let digestSeconds = 0;
  let zeros: ZeroBlocks = { bytes: 0, fills: [] };
  let framework: FrameworkUse | undefined;
  const blockSize = parent?.digests.blockSize ?? DIGEST_BLOCK;
  let copied = 0;
  // Staging cannot hold every piece at once: regions are reused.
  let ringMode = false;
  const groups: Placed[][] = [];
  try {
    allocations = snapshot?.allocations ?? (await session.listAllocations());
    pauseClock.mark('allocations');
    // A live image's rounds copy while the framework moves on: whole pool.
    framework = snapshot ? snapshot.framework : live || opts.wholePool ? undefined : await askFramework(session, allocations);
    pauseClock.mark('framework');
    const d0 = performance.now();
    digests = snapshot ? snapshot.digests : kernelLoaded ? await digestAllocations(session, allocations, blockSize) : undefined;
    digestSeconds = snapshot?.digestSeconds ?? (performance.now() - d0) / 1000;
    if ((parent || live) && !digests) throw new GpuckptError('NO_DIGEST_KERNEL', `process ${session.pid}: the driver would not run the digest kernel, so no ${live ? 'live' : 'incremental'} image can be made`);
    // All-zero runs stay on the GPU: the image records them by their digest.
    pauseClock.mark('digest');
    const plan = digests ? planBlocks(allocations, digests, blockSize, parent?.digests, MIN_SKIPPED_ZERO_RUN) : undefined;
    if (plan) zeros = plan.zeros;
    pauseClock.mark('plan');
    if (live) await copyChanged(live.finish(allocations, digests!, parent?.digests));
    else await copyPacked(splitIntoPieces(withoutUnused(plan?.stored ?? allocations, framework?.unused ?? [])));
    pauseClock.mark('copy');
    // Everything is in staging: the application may run again (or, for a
    // suspend, the GPU memory can go).
    holding = false;
    if (start.at === 'copied') allowCompressionOn(start.workers);
    try {
      // With a parent, staging holds only the changes: never the pool.
      // A live copy's groups hold every byte, zeros too.
      const left = live ? { bytes: 0, fills: [] } : zeros;
      await release({ complete: !ringMode && !parent, groups, zeroFills: left.fills, zeroBytes: left.bytes, staging });
      pauseClock.mark('release');
    } catch (e) {
      firstFailure ??= e;
      allowCompression();
      await Promise.allSettled(compressions);
      throw e;
    }
    pauseSeconds = snapshot?.pauseSeconds ?? (performance.now() - pauseStart) / 1000;
    storedAtPauseEnd = Number(writer.storedBytes);
    allowCompressionOn(undefined); // every worker once the application runs
    await Promise.all(compressions);
    if (firstFailure) throw firstFailure;
    if (tracing && firstCompressAt !== undefined)
      log('debug', `pool image ${session.pid}`, `${describeSpent(spent, performance.now() - firstCompressAt)}; their writes ${(appendMs / 1000).toFixed(3)} s in all, on libuv's threads`);
  } finally {
    if (holding) {
      // Let the application go whatever happened; then wait for workers
      // still reading staging before the caller tears it down.
      await session.resume().catch(() => undefined);
      firstFailure ??= new GpuckptError('INTERNAL', 'checkpoint abandoned');
      allowCompression();
      await Promise.allSettled(compressions);
    }
    progress.done();
  }

  /** Copies pieces packed into staging (reused as a ring when it cannot hold them all); each is compressed once copied. */
  async function copyPacked(all: Piece[]): Promise<void> {
    pieces = all;
    toWrite = all.reduce((s, p) => s + p.length, 0);
    const needed = packedBytes(pieces);
    const made = await stagingFor(needed);
    staging = made.staging;
    pauseClock.mark('staging');
    // Awaited with the copy: a worker that cannot take staging fails the checkpoint.
    const mapped = made.mapped.catch((e) => {
      firstFailure ??= e;
    });
    ring = new StagingRing(staging.size);
    const totalBytes = pieces.reduce((s, p) => s + p.length, 0);
    ringMode = needed > staging.size;
    start = startFor(false);
    if (start.at === 'copy') allowCompressionOn(start.workers);
    const batchBytes = start.at === 'copy' ? COMPRESSING_COPY_BYTES : Infinity;
    for (let i = 0; i < pieces.length; ) {
      // A batch never wraps over itself: its regions are held only once copied.
      const batch: { piece: Piece; offset: number }[] = [];
      let bytes = 0;
      do {
        batch.push({ piece: pieces[i]!, offset: await ring.place(pieces[i]!.length) });
        bytes += pieces[i]!.length;
        i++;
      } while (i < pieces.length && batch.length < MAX_RANGES_PER_COPY && bytes + pieces[i]!.length <= batchBytes && !ring.wraps(pieces[i]!.length));
      if (firstFailure) throw firstFailure;
      const c0 = performance.now();
      const ranges = batch.map(({ piece, offset }) => ({ device: piece.device, addr: piece.addr, length: piece.length, stagingOffset: offset }));
      await session.copyOut(ranges, !!snapshot);
      groups.push(ranges);
      copySeconds += (performance.now() - c0) / 1000;
      for (const { piece, offset } of batch) {
        const job = compressAndWrite(piece, offset).catch((e) => {
          firstFailure ??= e;
        });
        ring.hold(offset, piece.length, job);
        compressions.push(job);
        copied += piece.length;
      }
      progress.transfer('checkpoint: copied', copied, totalBytes);
    }
    await mapped;
    if (firstFailure) throw firstFailure;
  }

  /** checkpoint --live: staging holds the pool already, but for what changed since its copy; that is copied now. */
  async function copyChanged(plan: LivePlan): Promise<void> {
    staging = live!.staging;
    start = startFor(true);
    if (start.at === 'copy') allowCompressionOn(start.workers);
    pieces = plan.frames.map((f) => f.piece);
    toWrite += pieces.reduce((s, p) => s + p.length, 0);
    for (const request of plan.copies) {
      const c0 = performance.now();
      await session.copyOut(request);
      copySeconds += (performance.now() - c0) / 1000;
    }
    groups.push(...plan.groups);
    for (const { piece, offset } of plan.frames)
      compressions.push(
        compressAndWrite(piece, offset).catch((e) => {
          firstFailure ??= e;
        }),
      );
  }

  function startFor(isLive: boolean): CompressionStart {
    return compressionStart({ kind: opts.kind ?? 'gpu-only', ringMode, snapshot: !!snapshot, parent: !!parent, live: isLive }, codecs.size);
  }

  /** Compression may start, on that many frames at once (undefined: every worker's share). */
  function allowCompressionOn(workers: number | undefined): void {
    limiter.setLimit(workers ?? framesInFlight);
    allowCompression();
  }

  async function compressAndWrite(piece: Piece, stagingOffset: number): Promise<void> {
    await compressionAllowed;
    await limiter.run(async () => {
      if (firstFailure) return; // a failed checkpoint writes nothing more
      firstCompressAt ??= performance.now();
      const { data, planes, spent: frameSpent } = await codecs.compress(stagingOffset, piece.length, level, planesSetting);
      const a0 = performance.now();
      const fileOffset = await writer.appendFrame(data);
      firstWriteAt ??= performance.now();
      if (tracing) {
        spent.push(frameSpent);
        appendMs += performance.now() - a0;
      }
      frames.push({ device: piece.device, addr: piece.addr, length: piece.length, offset: fileOffset, compressedLength: data.length, ...(planes ? { planes } : {}) });
      written += piece.length;
      progress.transfer('checkpoint: compressed and written', written, toWrite);
    });
  }

  frames.sort((a, b) => (a.offset < b.offset ? -1 : a.offset > b.offset ? 1 : 0));
  return {
    staging,
    allocations,
    digests,
    blockSize,
    digestSeconds,
    zeroBytes: zeros.bytes,
    ...(framework ? { framework } : {}),
    frames,
    rawBytes: BigInt(pieces.reduce((s, p) => s + p.length, 0)),
    pauseSeconds,
    ...(snapshot ? {} : { pausePhases: pauseClock.phases }),
    copySeconds,
    drainSeconds: seconds(q.drainNs),
    syncSeconds: seconds(q.syncNs),
    ringMode,
    firstWriteAt,
    storedAtPauseEnd,
  };
}
