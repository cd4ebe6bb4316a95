/**
 * Suspend, resume and migrate: the process stays alive while its GPU is
 * freed entirely, and comes back on the same or another GPU of the host.
 *
 * suspend: pause, copy the whole pool by DMA into staging memory, release
 * the pool's GPU memory at once (the shim keeps the process held, and keeps
 * the staging memory: the data is safe in host memory), and let the driver
 * take the rest of the CUDA state to host memory (cuCheckpointProcessLock +
 * Checkpoint). The GPU is free after one DMA and the driver's step; nothing
 * is compressed on the way. With --to DIR a compressed image is written
 * from the same memory after the GPU is free, and the held copy is dropped
 * once the image is complete. When the host cannot hold the pool at once,
 * the image is written first (compressed, /dev/shm unless --to) and the
 * pool released after.
 * resume: driver restore (remapped onto the target GPU when asked), map the
 * pool again at the same addresses, DMA the held data (or load the image)
 * back, let the process go.
 * A migrate (migrate.ts) is a suspend onto another GPU and a resume there.
 */
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { writePoolImage, type CheckpointOptions, type CheckpointSummary, type Staged } from './pool-image.js';
import { driverFreeze, driverState, driverThaw, type GpuPair } from '../adapters/driver-checkpoint.js';
import { endDriverKeeper, startDriverKeeper } from '../adapters/driver-keeper.js';
import { GpuckptError, isGpuckptError } from '../base/errors.js';
import { faultPoint } from '../base/faults.js';
import { log } from '../base/log.js';
import { loadDigestKernels } from './block-digests.js';
import type { FrameworkUse } from './framework-free.js';
import { checkGpuRoom, measureGpuNeeds, readGpuNeeds, writeGpuNeeds, type GpuNeed } from './gpu-room.js';
import { copyHeldIn, describeHeld, mapHeldStaging, readHeldLayout, stagePool, type HeldLayout } from './held-memory.js';
import { adoptKept, dropKept, keepStaging, takeKeptStaging } from './kept-copy.js';
import { ImageReader, MANIFEST_FILE, publishedPath, removeStaleTempDirs, tempDirOwner } from '../image/index.js';
import { besidesHeld, holdOnGpus } from './peer-hold.js';
import { PhaseClock, type Phases } from '../base/phase-clock.js';
import type { ThawOrder } from './thaw-order.js';
import { Progress } from '../base/progress.js';
import { PoolLoader, type LoaderOptions } from './pool-loader.js';
import { holdBaseDir } from '../adapters/run-dir.js';
import { closeStaging, ShimSession, type StagingMemory } from '../adapters/session.js';
import { formatBytes, round } from '../base/units.js';
import { native, PoolState } from '../../native/index.js';

/** The GPUs the process's ordinals stand for now, written beside the held
 * data when a driver restore has moved them and the process was frozen
 * again (a resume that found no memory for the pool on its target). */
const CURRENT_DEVICES = 'current-devices.json';
const SUSPEND_LEASE_MS = 10 * 60_000;

export interface SuspendSummary {
  pid: number;
  /** Where the pool's data is held: the hold directory (in host or GPU memory) or the image. */
  image: string;
  heldIn: 'memory' | 'gpu' | 'image';
  /** Asked to hold it on another GPU (a migrate) but could not: why. */
  whyNotOnGpu?: string;
  rawBytes: number;
  /** Bytes of all-zero blocks: left on the GPU, set to zero again by the resume. */
  zeroBytes: number;
  /** Bytes of the image; 0 while the data is held in memory. */
  storedBytes: number;
  /** Through an image: what the framework held unused, left out of it. */
  framework?: FrameworkUse;
  /** The DMA out, in the application's pause (of the bytes it moved). */
  copyGBps: number;
  /** From the start to the pool's GPU memory being released. */
  poolReleasedSeconds: number;
  /** From the start to the driver holding no GPU memory for the process. */
  gpuFreeSeconds: number;
  /** From the start to the application's (first) pause: what it ran through. */
  pauseStartSeconds: number;
  /** Zero pages of the driver's host copy of the device state, let go (CRIU dumps no such page). */
  driverZeroBytes: number;
  seconds: number;
  /** Seconds of each step, in order. */
  phases: Phases;
  /** A driver keeper holds the CUDA driver initialised for the resume (driver-keeper.ts). */
  driverKept: boolean;
  /**
   * handOff: the image still being written, the data kept by the snapshot
   * holder meanwhile (and described in the hold directory): this summary
   * again once it is complete. Its failure leaves the process suspended.
   */
  pending?: Promise<SuspendSummary>;
}

/** A suspend's figures, before the driver keeper's answer. */
type Suspended = Omit<SuspendSummary, 'driverKept' | 'pending'>;

export interface ResumeSummary {
  pid: number;
  image: string;
  device?: string;
  rawBytes: number;
  driverRestoreSeconds: number;
  remapSeconds: number;
  /** 0 when the data was on the GPU already (a migrate's peer hold). */
  copyGBps: number;
  /** Held on another GPU than the one the process resumed on: what the remap copied across. */
  remapCopiedBytes: number;
  seconds: number;
  phases: Phases;
}

/** Where a suspended process's pool is described (and, without room in memory, stored). */
export function defaultHoldDir(pid: number): string {
  return join(holdBaseDir(), `suspended-${pid}`);
}

type SuspendOptions = CheckpointOptions & { to?: string; onto?: string; viaHost?: boolean; keepDriver?: boolean; handOff?: HandOff };

/** A checkpoint's other working directories, which a resume from the holder's copy removes with the image's (half made then). */
export interface HandOff {
  halfMade: string[];
}

/**
 * to: write an image there. onto (a migrate): the GPU the process will be
 * resumed on, checked for room before anything moves; the pool goes there
 * GPU to GPU unless viaHost. keepDriver: leave a driver keeper running for
 * the resume, started now, while the application still holds the driver.
 * handOff (with to; a whole-process checkpoint): once the GPU is free, the
 * staging goes to the snapshot holder, the shim lets go of it, and the
 * suspend returns while the image is written: pending is its end.
 */
export async function suspendProcess(pid: number, opts: SuspendOptions = {}): Promise<SuspendSummary> {
  const keeper = opts.keepDriver ? startDriverKeeper(pid) : undefined;
  let suspended: Suspended & { pending?: Promise<Suspended> };
  try {
    suspended = await suspendHolding(pid, opts);
  } catch (e) {
    keeper?.end();
    throw e;
  }
  const { pending, ...now } = suspended;
  const driverKept = keeper ? await keeper.keep() : false;
  return { ...now, driverKept, ...(pending ? { pending: pending.then((s) => ({ ...s, driverKept })) } : {}) };
}

async function suspendHolding(pid: number, opts: SuspendOptions): Promise<Suspended & { pending?: Promise<Suspended> }> {
  const t0 = performance.now();
  const clock = new PhaseClock(`suspend ${pid}`);
  const holdDir = defaultHoldDir(pid);
  const session = await ShimSession.open(pid);
  clock.mark('connect');
  try {
    const status = await session.status();
    if (status.poolState === PoolState.SUSPENDED)
      throw new GpuckptError('ALREADY_SUSPENDED', `process ${pid} is already suspended (its pool is held at ${status.heldImage})`);
    // Asked first: the shim answers requests in order, and this one would
    // otherwise wait behind the pinning of its bounce ring below.
    const devices = await session.devices();
    // Held in host memory: the shim makes the staging while the checks run
    // (a refusal below drops it with the session; nothing has moved).
    const early = opts.to || opts.onto ? undefined : mapHeldStaging(session, status, opts.stagingLimit);
    early?.catch(() => undefined); // awaited below, where its failure counts
    // The digest kernel finds the all-zero blocks the copy leaves out; the
    // driver's first compile of it stays out of the pause.
    const kernel = early && session.poolActive ? loadDigestKernels(session, status) : Promise.resolve(false);
    kernel.catch(() => undefined);
    await driverState(pid); // a driver without the checkpoint API is refused before anything moves
    const uuids = devices.map((d) => d.uuid);
    const needs = measureGpuNeeds(pid, devices, status);
    const pairs = opts.onto ? gpuPairs(uuids, opts.onto) : undefined;
    if (pairs) checkGpuRoom(pid, needs, uuids, pairs, `process ${pid} carries on where it is`);
    rmSync(holdDir, { recursive: true, force: true });
    mkdirSync(holdDir, { recursive: true, mode: 0o700 });
    clock.mark('checks');
    const times = { released: 0, gpuFree: 0, paused: 0, driverZeroBytes: 0 };

    /**
     * The pool's GPU memory released, its data held at where (held: in the
     * staging memory or on other GPUs, described there; else an image),
     * then the driver's part: the GPU is free. stillRunning cleans up after
     * a refusal.
     */
    const freeGpu = async (where: string, held: 'staging' | 'peer' | undefined, stillRunning: () => void) => {
      const image = held ? undefined : where;
      try {
        await session.suspendPool(where, held);
      } catch (e) {
        await resumeHalfSuspended(session, pid, e, { keepImage: !held, image }, stillRunning);
      }
      times.released = performance.now();
      times.paused = session.firstPauseAt ?? times.released; // every route pauses before it gets here
      clock.mark('release');
      await freezeOrResume(pid, image, clock);
      times.gpuFree = performance.now();
      // A migrate resumes at once: what CRIU would not dump costs it time.
      if (!opts.onto) times.driverZeroBytes = await dropDriverZeros(session, clock);
    };

    /** Staging (or memory on other GPUs) holds the whole pool: hand it to the shim, free the GPU. */
    const releaseHeld = async (layout: HeldLayout, held: 'staging' | 'peer' = 'staging') => {
      describeHeld(holdDir, layout, needs);
      await freeGpu(holdDir, held, () => rmSync(holdDir, { recursive: true, force: true }));
    };

    let whyNotOnGpu: string | undefined;
    if (pairs && !opts.viaHost && !opts.to) {
      const held = await holdOnGpus(session, status, uuids, pairs, { leaseMs: opts.leaseMs ?? SUSPEND_LEASE_MS }, clock);
      if ('layout' in held) {
        await releaseHeld(held.layout, 'peer');
        return summary(pid, holdDir, 'gpu', { rawBytes: held.layout.rawBytes, zeroBytes: 0 }, 0, held.copiedBytes / 1e9 / Math.max(held.copySeconds, 1e-9), t0, times, clock);
      }
      whyNotOnGpu = held.why;
    }
    if (!opts.to) {
      const staging = await (early ?? mapHeldStaging(session, status, opts.stagingLimit));
      const digests = await kernel;
      const staged = await stagePool(session, staging, uuids, { leaseMs: opts.leaseMs ?? SUSPEND_LEASE_MS, digests, progress: new Progress(opts.progress) }, clock);
      if (staged) {
        await releaseHeld(staged.layout);
        const { rawBytes, heldBytes } = staged.layout;
        return { ...summary(pid, holdDir, 'memory', { rawBytes, zeroBytes: rawBytes - heldBytes }, 0, staged.layout.heldBytes / 1e9 / Math.max(staged.copySeconds, 1e-9), t0, times, clock), whyNotOnGpu };
      }
    }

    // Through an image: at DIR, or in the hold directory when the host
    // cannot hold the raw pool at once.
    const image = opts.to ? resolve(opts.to) : join(holdDir, 'image');
    let held = false;
    // The staging stays mapped here until the shim has let go of it (writePoolImage's closeLater).
    let close: (() => Promise<void>) | undefined;
    const closeNowOrLater = async () => {
      if (close && opts.closeLater) opts.closeLater(close);
      else await close?.();
    };
    // handOff: true once the holder keeps the staging and the shim has let go of it.
    let handedOff: ((kept: boolean) => void) | undefined;
    const handed = opts.handOff ? new Promise<boolean>((r) => (handedOff = r)) : undefined;
    const writing = writePoolImage(
      session,
      image,
      { ...opts, force: opts.to ? opts.force : true, leaseMs: opts.leaseMs ?? SUSPEND_LEASE_MS, prepareDuringCopy: true, closeLater: (c) => (close = c) },
      async (staged: Staged) => {
        if (!staged.complete) return; // staging was reused: the image must be complete first
        held = true;
        const heldBytes = staged.groups.flat().reduce((s, p) => s + p.length, 0);
        const layout = { rawBytes: heldBytes + staged.zeroBytes, heldBytes, zeroFills: staged.zeroFills, devices: uuids, groups: staged.groups };
        await releaseHeld(layout);
        handedOff?.(await handOver(session, holdDir, { ...layout, halfMade: [image, ...opts.handOff!.halfMade] }, staged.staging, needs));
      },
    );
    const imageDone = (written: CheckpointSummary) => {
      clock.mark('image');
      return { ...summary(pid, image, 'image', { rawBytes: written.poolBytes, zeroBytes: written.zeroBytes }, written.storedBytes, written.copyGBps, t0, times, clock), whyNotOnGpu, ...(written.framework ? { framework: written.framework } : {}) };
    };
    let written;
    try {
      if (handed && (await Promise.race([handed, writing.then(() => false)]))) {
        // The rest of the image is written while the caller goes on (CRIU
        // dumps), without this session: the process must not be connected.
        clock.mark('hand-off');
        const pending = writing.then(async (w) => {
          writeGpuNeeds(image, needs);
          await closeNowOrLater();
          return imageDone(w);
        });
        // Its bytes and rates come with pending.
        return { ...summary(pid, image, 'image', { rawBytes: 0, zeroBytes: 0 }, 0, 0, t0, times, clock), whyNotOnGpu, pending };
      }
      written = await writing;
    } catch (e) {
      if (!held || !times.gpuFree) throw e;
      // Suspended with the data in memory, but no image: resume rather than
      // leave the process without the image it was promised.
      const back = await resumeProcess(pid).then(() => true, () => false);
      throw new GpuckptError(isGpuckptError(e) ? e.code : 'INTERNAL', `${(e as Error).message}; ${back ? `process ${pid} resumed` : `process ${pid} stays suspended with its pool in memory (gpuckpt resume ${pid})`}`);
    }
    try {
      writeGpuNeeds(image, needs);
      if (held) {
        await session.dropHeld(image);
        rmSync(holdDir, { recursive: true, force: true });
      } else {
        await freeGpu(image, undefined, () => {
          if (!opts.to) rmSync(holdDir, { recursive: true, force: true });
        });
      }
    } finally {
      await closeNowOrLater();
    }
    return imageDone(written);
  } finally {
    session.close();
  }
}

/**
 * The held staging handed to the snapshot holder, described at holdDir
 * for a resume, and let go by the shim: true. false (the shim keeps it)
 * when either step fails.
 */
async function handOver(session: ShimSession, holdDir: string, layout: HeldLayout, staging: StagingMemory, needs: GpuNeed[]): Promise<boolean> {
  const id = await keepStaging(session.pid, staging, holdDir, layout, needs);
  if (!id) return false;
  try {
    await session.dropHeld(holdDir);
    return true;
  } catch (e) {
    log('warn', 'checkpoint', `process ${session.pid} kept its pool's staging (${(e as Error).message}): its pool image is written first`);
    describeHeld(holdDir, { ...layout, halfMade: undefined }, needs);
    await dropKept(session.pid, id);
    return false;
  }
}

function summary(
  pid: number,
  image: string,
  heldIn: SuspendSummary['heldIn'],
  pool: { rawBytes: number; zeroBytes: number },
  stored: number,
  copyGBps: number,
  t0: number,
  times: { released: number; gpuFree: number; paused: number; driverZeroBytes: number },
  clock: PhaseClock,
): Suspended {
  return {
    pid,
    image,
    heldIn,
    rawBytes: pool.rawBytes,
    zeroBytes: pool.zeroBytes,
    storedBytes: stored,
    copyGBps: round(copyGBps, 2),
    poolReleasedSeconds: round((times.released - t0) / 1000),
    gpuFreeSeconds: round((times.gpuFree - t0) / 1000),
    pauseStartSeconds: round((times.paused - t0) / 1000),
    driverZeroBytes: times.driverZeroBytes,
    seconds: round((performance.now() - t0) / 1000),
    phases: clock.phases,
  };
}

/**
 * A refused SUSPEND_POOL: mostly the process still runs (the gate reopens
 * as the session closes; stillRunning cleans up). But when the driver kept
 * part of the pool mapped, the shim has released the rest and counts the
 * process suspended: it is resumed from where its data is held. Throws.
 */
export async function resumeHalfSuspended(
  session: ShimSession,
  pid: number,
  e: unknown,
  where: { keepImage?: boolean; image?: string },
  stillRunning: () => void,
): Promise<never> {
  const st = await session.status().catch(() => undefined);
  if (st?.poolState !== PoolState.SUSPENDED) {
    stillRunning();
    throw e;
  }
  const back = await resumeProcess(pid, where).then(
    () => true,
    () => false,
  );
  const code = isGpuckptError(e) ? e.code : 'SHIM_ERROR';
  throw new GpuckptError(code, `${(e as Error).message}; ${back ? `process ${pid} resumed` : `process ${pid} stays suspended with its data held (gpuckpt resume ${pid})`}`);
}

/**
 * The zero pages of the driver's host copy let go, so that CRIU neither
 * reads nor writes them: the bytes dropped. A shim that cannot costs
 * nothing but those bytes, so its refusal is a warning.
 */
async function dropDriverZeros(session: ShimSession, clock: PhaseClock): Promise<number> {
  try {
    const r = await session.dropDriverZeros();
    clock.mark('driverZeros');
    if (r.mappings) log('debug', 'suspend', `process ${session.pid}: ${r.droppedBytes} of ${r.scannedBytes} bytes of the driver's copy were zero pages, dropped in ${(r.ns / 1e9).toFixed(3)} s`);
    return r.droppedBytes;
  } catch (e) {
    log('warn', 'suspend', `process ${session.pid} keeps the zero pages of the driver's copy: ${(e as Error).message}`);
    return 0;
  }
}

/** The driver's half of a suspend; if it fails, the process is brought back from where its pool is held. */
export async function freezeOrResume(pid: number, image?: string, clock?: PhaseClock): Promise<void> {
  try {
    await driverFreeze(pid, clock);
  } catch (e) {
    const back = await resumeProcess(pid, { keepImage: true, image }).then(
      () => true,
      () => false,
    );
    const code = isGpuckptError(e) ? e.code : 'DRIVER_CHECKPOINT';
    if (!back) throw new GpuckptError(code, `suspend failed and process ${pid} could not be resumed; its pool is held (gpuckpt resume ${pid}): ${(e as Error).message}`);
    throw new GpuckptError(code, `suspend failed, process ${pid} resumed: ${(e as Error).message}`);
  }
}

export async function resumeProcess(
  pid: number,
  opts: LoaderOptions & {
    device?: string;
    keepImage?: boolean;
    image?: string;
    loader?: PoolLoader;
    /** The connection stays open until this settles: the shim lets go of the staging it was given only when it closes. */
    holdUntil?: Promise<unknown>;
    /** Resumed with others: a process without pool data thaws in the driver once they have pinned their staging. */
    thawOrder?: ThawOrder;
  } = {},
): Promise<ResumeSummary> {
  const t0 = performance.now();
  const clock = new PhaseClock(`resume ${pid}`);
  const turn = opts.thawOrder?.member();
  const session = await ShimSession.open(pid).catch((e: unknown) => {
    turn?.done(); // the others' turns come without this one
    throw e;
  });
  clock.mark('connect');
  // Opened here and closed here; a loader (and its reader) the caller gave stays the caller's.
  let reader: ImageReader | undefined;
  let loader: PoolLoader | undefined;
  let kept: StagingMemory | undefined;
  try {
    const status = await session.status();
    if (status.poolState !== PoolState.SUSPENDED) throw new GpuckptError('NOT_SUSPENDED', `process ${pid} is not suspended`);
    // A process restored by CRIU remembers where its pool was held while
    // the image was being made; the image's final place is given instead.
    const given = opts.loader?.reader;
    const where = given?.path ?? opts.image ?? heldWhere(pid, status.heldImage);
    const layout = given || opts.image ? undefined : readHeldLayout(where);
    if (!layout && !given) reader = await ImageReader.open(where);
    const imageReader = given ?? reader;
    const taken = layout?.devices ?? imageReader!.manifest.devices.map((d) => d.uuid);
    const rawBytes = layout?.rawBytes ?? Number(imageReader!.manifest.data.rawBytes);
    const current = currentDevices(where) ?? taken;
    // Held on other GPUs, the data is where the process was going.
    const wanted = opts.device ?? layout?.gpus?.[0];
    const target = wanted === undefined ? undefined : resolveGpu(wanted);
    const pairs = target ? gpuPairs(current, target.uuid) : undefined;
    const needs = readGpuNeeds(where);
    checkGpuRoom(pid, layout?.gpus ? besidesHeld(needs, layout.gpus, current, pairs) : needs, current, pairs, `process ${pid} stays suspended; resume it with --device on another GPU`);
    // Kept by the snapshot holder (its checkpoint's controller died, or its
    // dump failed): a copy on the GPU goes back to the shim first; staging
    // in host memory is taken back now and given once the pool is mapped.
    if (layout?.holder && !layout.files) await adoptKept(session, pid, layout.holder, layout.gpus ?? []);
    if (layout?.holder && layout.files) kept = await takeKeptStaging(pid, layout.holder, layout.files);
    clock.mark('checks');

    try {
      await turn?.wait(rawBytes === 0);
      await driverThaw(pid, pairs, clock);
    } catch (e) {
      // A restore the driver refused leaves the process checkpointed.
      const gpu = target ? `GPU ${target.uuid}` : 'the GPU';
      if (isGpuckptError(e, 'GPU_OUT_OF_MEMORY'))
        throw new GpuckptError('TARGET_NO_MEMORY', `${gpu} has no room for process ${pid}: it stays suspended; resume it with --device on another GPU`);
      throw new GpuckptError(isGpuckptError(e) ? e.code : 'DRIVER_CHECKPOINT', `${(e as Error).message}: process ${pid} stays suspended`);
    }
    const thawed = performance.now();
    let remapped;
    try {
      remapped = await session.remapPool();
    } catch (e) {
      // Stay suspended: free the GPU again whatever else fails, and
      // remember where the driver put us (for the next resume's checks).
      try {
        const now = (await session.devices()).map((d) => d.uuid);
        writeFileSync(join(where, CURRENT_DEVICES), JSON.stringify(now));
      } finally {
        await driverFreeze(pid);
      }
      if (isGpuckptError(e, 'GPU_OUT_OF_MEMORY'))
        throw new GpuckptError('TARGET_NO_MEMORY', `${target ? `GPU ${target.uuid}` : 'the GPU'} has no room for the pool (${formatBytes(rawBytes)}): process ${pid} stays suspended; resume it with --device on another GPU`);
      throw new GpuckptError(isGpuckptError(e) ? e.code : 'SHIM_ERROR', `${(e as Error).message}: process ${pid} stays suspended`);
    }
    const mappedAt = performance.now();
    clock.mark('remap');
    let copySeconds: number;
    // The driver's part of this resume ends with the staging pinned: a
    // member without data thaws beside the copy, not the remap and pinning
    // (a loader's attach also waits for its load, done during a restore's CRIU).
    const prepared = () => turn?.done();
    if (layout?.gpus) {
      prepared();
      copySeconds = Infinity; // mapped where it was held, or copied there by the remap
    } else if (layout) {
      copySeconds = await copyHeldIn(session, layout, { clock, progress: new Progress(opts.progress), kept, prepared });
    } else {
      const using = opts.loader ?? (loader = await PoolLoader.open(imageReader!, opts));
      await using.attach(session);
      clock.mark('prepare');
      prepared();
      copySeconds = await using.copyIn(session);
      clock.mark('copy');
    }
    faultPoint('reopen');
    await session.resume();
    clock.mark('reopen');
    endDriverKeeper(pid); // the application holds the driver again
    if (layout?.holder) await dropKept(pid, layout.holder);
    // Held in memory, the layout's directory is the hold directory: removed whole.
    if (layout || (!opts.keepImage && where === join(defaultHoldDir(pid), 'image'))) rmSync(defaultHoldDir(pid), { recursive: true, force: true });
    // Held in a checkpoint's working directory (its controller died while CRIU dumped): half an image, not to be kept.
    if (!opts.keepImage && tempDirOwner(basename(where)) === pid) rmSync(where, { recursive: true, force: true });
    // What a checkpoint was making from the held data, half made, and its
    // pool image's writing beside it, left by a controller that died.
    const halfMade = opts.keepImage ? [] : (layout?.halfMade ?? []);
    for (const dir of halfMade) if (tempDirOwner(basename(dir)) === pid) rmSync(dir, { recursive: true, force: true });
    for (const parent of new Set(halfMade.map((dir) => dirname(dir)))) await removeStaleTempDirs(parent);
    return {
      pid,
      image: where,
      device: target?.uuid,
      rawBytes,
      driverRestoreSeconds: round((thawed - t0) / 1000),
      remapSeconds: round((mappedAt - thawed) / 1000),
      copyGBps: round((layout?.heldBytes ?? rawBytes) / 1e9 / Math.max(copySeconds, 1e-9), 2),
      remapCopiedBytes: remapped.bytesCopied,
      seconds: round((performance.now() - t0) / 1000),
      phases: clock.phases,
    };
  } finally {
    turn?.done(); // a failure before the thaw lets the others' turns come
    if (opts.holdUntil) void opts.holdUntil.finally(() => session.close()).catch(() => undefined);
    else session.close();
    if (kept) closeStaging(kept); // the shim has its own fds of it
    await loader?.close();
    await reader?.close();
  }
}

/** "N" (this host's ordinal) or a GPU UUID → the GPU. */
export function resolveGpu(spec: string): { ordinal: number; uuid: string; name: string } {
  const gpus = native().listGpus();
  const found = /^[0-9]+$/.test(spec) ? gpus[Number(spec)] : gpus.find((g) => g.uuid.toLowerCase() === spec.toLowerCase() || g.uuid.toLowerCase() === `gpu-${spec.toLowerCase()}`);
  if (!found) throw new GpuckptError('NO_SUCH_GPU', `no GPU "${spec}" on this host (${gpus.length} GPU(s): ${gpus.map((g) => `${g.ordinal}=${g.uuid}`).join(', ') || 'none'})`);
  return found;
}

/**
 * The driver remaps a process only by a permutation of every GPU it sees:
 * the process's first GPU goes to the target, and the target (if the
 * process sees it) takes the first one's place.
 */
export function gpuPairs(processGpus: string[], target: string): GpuPair[] {
  const first = processGpus[0];
  if (!first) return [];
  return processGpus.map((u) => ({ from: u, to: u === first ? target : u === target ? first : u }));
}

/**
 * Where a suspended process's pool is: where its shim was told, or, when
 * that was a checkpoint's working directory published since (its
 * controller died between the publishing and CRIU's end of the job), the
 * image it became.
 */
function heldWhere(pid: number, held: string): string {
  const published = tempDirOwner(basename(held)) === pid && !existsSync(held) ? publishedPath(held) : undefined;
  return published && existsSync(join(published, MANIFEST_FILE)) ? published : held;
}

function currentDevices(image: string): string[] | undefined {
  try {
    return JSON.parse(readFileSync(join(image, CURRENT_DEVICES), 'utf8')) as string[];
  } catch {
    return undefined;
  }
}
