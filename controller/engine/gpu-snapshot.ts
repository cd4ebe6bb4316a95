/**
 * checkpoint --leave-running with a pause of about a second: the pool is
 * copied on its own GPU instead of through host memory.
 *
 * The pause: copy every chunk in use device to device into memory this
 * process allocated on the same GPU (peer-hold.ts with copyInPlace; 16 GiB
 * in about 0.02 s at HBM speed), take the allocation list and the block
 * digests, release the pool, the driver's checkpoint, `criu dump
 * --leave-running`, the driver's restore, the pool mapped again and the copy
 * copied back, and the application runs. Only then is the image written,
 * from the copy (mapped in the shim as its mirror, GPCK_PEER_MIRROR) while
 * the application runs; the caller then makes CRIU's files durable.
 *
 * CRIU cannot dump a process holding the copy's fds: the shim gives them up
 * (DROP_HELD) just before the dump, and this process's copies of them keep
 * the data until it is copied back. A failure before the dump resumes the
 * process from the copy the shim holds, as after a migrate; one after it
 * hands the copy back to the shim first (GPCK_PEER_ADOPT). While the shim
 * has let it go, the snapshot holder keeps the copy too (kept-copy.ts): a
 * controller killed during the dump leaves the process suspended, and a
 * resume takes the copy back from the holder.
 *
 * Not taken (whyNot; the caller goes through host memory) when the pool is
 * empty or not running, or a GPU lacks room for the copy with memory to spare
 * for the application, which runs on while the copy is allocated.
 */
import { mkdirSync, renameSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { readParent, writePoolImage, type CheckpointOptions, type CheckpointSummary } from './pool-image.js';
import { loadDigestKernels, digestAllocations } from './block-digests.js';
import { askFramework } from './framework-free.js';
import { criuDump, type Criu } from '../adapters/criu.js';
import { driverState, driverThaw } from '../adapters/driver-checkpoint.js';
import { GpuckptError, isGpuckptError } from '../base/errors.js';
import { faultPoint } from '../base/faults.js';
import { measureGpuNeeds, whyNoRoomForCopy, writeGpuNeeds, type GpuNeed } from './gpu-room.js';
import { describeHeld, type HeldLayout } from './held-memory.js';
import { DIGEST_BLOCK } from '../image/format.js';
import { tempDirName } from '../image/temp-dirs.js';
import { adoptCopy, closeAll, holdOnGpus, inBatches } from './peer-hold.js';
import { dropKept, keepCopy } from './kept-copy.js';
import { PhaseClock, type Phases } from '../base/phase-clock.js';
import { ShimSession } from '../adapters/session.js';
import { defaultHoldDir, freezeOrResume, resumeHalfSuspended, resumeProcess } from './suspend.js';
import { round } from '../base/units.js';
import { PoolState, type StatusReply } from '../../native/index.js';

/** The copy on the GPU once the shim has let it go: where to describe it (the image's working directory) should it be handed back. */
interface HeldCopy {
  work: string;
  layout: HeldLayout;
  needs: GpuNeed[];
  /** The snapshot holder's id of its copy of it (kept-copy.ts). */
  kept?: string;
}

export interface LeftRunning {
  /** From the application's pause until it ran again. */
  pauseSeconds: number;
  /** From the start until the GPU held none of the process's memory (in the pause). */
  gpuFreeSeconds: number;
  dumpSeconds: number;
  image: CheckpointSummary;
  /** Steps of the pause and before it, in order. */
  phases: Phases;
}

/** Why a copy on the GPU cannot serve, or undefined. */
function whyNot(status: StatusReply, uuids: string[], chunk: bigint): string | undefined {
  if (status.poolState !== PoolState.ACTIVE) return 'the pool is not running';
  if (!status.devices.some((d) => d.chunksInUse > 0)) return 'the pool is empty';
  return whyNoRoomForCopy(status, uuids, chunk, 'a copy');
}

/**
 * The whole-process checkpoint of a process left running, through a copy on
 * its GPUs: the pool image at work (written there, as writePoolImage does),
 * CRIU's files of dump.root's tree at work/criuName. Returns whyNot with
 * the process untouched when the route does not serve.
 */
export async function checkpointLeavingRunning(
  pid: number,
  work: string,
  criuName: string,
  criu: Criu,
  dump: { root: number; args: string[] },
  opts: CheckpointOptions,
): Promise<LeftRunning | { whyNot: string }> {
  const t0 = performance.now();
  const clock = new PhaseClock('checkpoint --leave-running');
  const session = await ShimSession.open(pid);
  let fds: number[][] = [];
  try {
    const status = await session.status();
    const devices = await session.devices();
    const uuids = devices.map((d) => d.uuid);
    const why = whyNot(status, uuids, session.hello.chunkSize);
    if (why) return { whyNot: why };
    await driverState(pid); // a driver without the checkpoint API is refused before anything moves
    const kernel = await loadDigestKernels(session, status);
    if (opts.parent) {
      if (!kernel) return { whyNot: 'the driver will not run the digest kernel' };
      await readParent(opts.parent, opts.finalImage ?? work, session); // refused before the pause
    }
    const needs = measureGpuNeeds(pid, devices, status);
    clock.mark('checks');

    const held = await holdOnGpus(session, status, uuids, uuids.map((u) => ({ from: u, to: u })), { leaseMs: opts.leaseMs, copyInPlace: true }, clock);
    if (!('layout' in held)) return { whyNot: held.why };
    fds = held.fds!;
    const pausedAt = session.firstPauseAt!;
    // Paused, the pool whole: what the image needs from it.
    let snapshot;
    try {
      const allocations = await session.listAllocations();
      const framework = opts.wholePool ? undefined : await askFramework(session, allocations);
      const d0 = performance.now();
      const digests = kernel ? await digestAllocations(session, allocations, DIGEST_BLOCK) : undefined;
      snapshot = { allocations, digests, digestSeconds: (performance.now() - d0) / 1000, ...(framework ? { framework } : {}) };
    } catch (e) {
      await session.resume().catch(() => undefined);
      throw e;
    }
    clock.mark('digest');

    // Suspended with the copy held by the shim: a failure until the dump
    // resumes the process from it, as a migrate's would.
    const holdDir = defaultHoldDir(pid);
    rmSync(holdDir, { recursive: true, force: true });
    mkdirSync(holdDir, { recursive: true, mode: 0o700 });
    describeHeld(holdDir, held.layout, needs);
    try {
      await session.suspendPool(holdDir, 'peer');
    } catch (e) {
      await resumeHalfSuspended(session, pid, e, {}, () => rmSync(holdDir, { recursive: true, force: true }));
    }
    clock.mark('release');
    await freezeOrResume(pid, undefined, clock);
    const gpuFree = performance.now();
    // The holder keeps the copy before the shim lets it go: the other way
    // round, a controller killed between the two left the copy only here,
    // and lost it (the kill test found it on a loaded 2-core machine).
    const kept = await keepCopy(pid, fds, uuids, session.hello.chunkSize, work, held.layout, needs);
    try {
      await session.dropHeld(work);
    } catch (e) {
      if (kept) await dropKept(pid, kept);
      await resumeProcess(pid).catch(() => undefined);
      throw e;
    }
    rmSync(holdDir, { recursive: true, force: true });
    session.close(); // CRIU dumps no process with a connected peer

    // CRIU's files in work, beside the kept copy's description: a resume
    // after this controller's end removes both.
    let criuDir = join(work, criuName);
    const d0 = performance.now();
    let dumpFailure: unknown;
    try {
      mkdirSync(criuDir, { recursive: true, mode: 0o700 });
      criuDump(criu, dump.root, criuDir, { leaveRunning: true, args: dump.args });
    } catch (e) {
      dumpFailure = e;
    }
    const dumpSeconds = (performance.now() - d0) / 1000;
    clock.mark('dump');

    let back: ShimSession;
    try {
      back = await copyBack(pid, fds, { work, layout: held.layout, needs, ...(kept ? { kept } : {}) }, clock);
      if (kept) await dropKept(pid, kept);
      // Out of the way while the image is written at work; this controller's
      // own (the process runs again): stale, and cleaned, if it dies.
      const parked = join(dirname(work), tempDirName(`${basename(work)}-criu`));
      renameSync(criuDir, parked);
      criuDir = parked;
      rmSync(work, { recursive: true, force: true });
    } catch (e) {
      rmSync(criuDir, { recursive: true, force: true });
      if (!dumpFailure) throw e;
      throw new GpuckptError('CRIU_FAILED', `${(dumpFailure as Error).message}; then ${(e as Error).message}`);
    }
    const pauseSeconds = (performance.now() - pausedAt) / 1000;
    try {
      if (dumpFailure) throw new GpuckptError('CRIU_FAILED', `${(dumpFailure as Error).message}; process ${pid} resumed`);
      // The image, from the copy, while the application runs.
      await inBatches(fds, (device, first, batch) => back.peerMirror(device, first, batch));
      closeAll(fds); // the mirror holds the memory now
      const image = await writePoolImage(back, work, { ...opts, kind: 'process', prepareDuringCopy: true, snapshot: { ...snapshot, pauseSeconds } }, async () => undefined);
      writeGpuNeeds(work, needs);
      renameSync(criuDir, join(work, criuName));
      return { pauseSeconds: round(pauseSeconds, 4), gpuFreeSeconds: round((gpuFree - t0) / 1000), dumpSeconds: round(dumpSeconds), image, phases: clock.phases };
    } catch (e) {
      rmSync(criuDir, { recursive: true, force: true });
      throw e;
    } finally {
      back.close(); // and with it the mirror
    }
  } finally {
    session.close();
    closeAll(fds);
  }
}

/**
 * The second half of the pause: the driver's restore, the pool mapped again
 * and the copy copied back in, the application let go. Returns the session,
 * which the image is then read through. On failure the copy is handed back
 * to the shim (handBack) and the process resumed from it if it can be.
 */
async function copyBack(pid: number, fds: number[][], held: HeldCopy, clock: PhaseClock): Promise<ShimSession> {
  const session = await ShimSession.open(pid);
  try {
    await driverThaw(pid, undefined, clock);
    await session.remapPool();
    clock.mark('remap');
    faultPoint('copy-back');
    await inBatches(fds, (device, first, batch, last) => session.peerCopyIn(device, first, batch, last));
    clock.mark('copyBack');
    await session.resume();
    clock.mark('reopen');
    return session;
  } catch (e) {
    session.close();
    const code = isGpuckptError(e) ? e.code : 'SHIM_ERROR';
    throw new GpuckptError(code, `${(e as Error).message}; ${await handBack(pid, fds, held)}`);
  }
}

/**
 * After a failed copy back: the shim takes the copy on the GPU back as a
 * suspend's hold (GPCK_PEER_ADOPT, described at work, where the shim looks
 * for it), and the process is resumed from it as after a migrate. Returns
 * what became of the process.
 */
async function handBack(pid: number, fds: number[][], held: HeldCopy): Promise<string> {
  try {
    mkdirSync(held.work, { recursive: true, mode: 0o700 });
    describeHeld(held.work, held.layout, held.needs);
    const session = await ShimSession.open(pid);
    try {
      // The failed session's leaving (the pool released again) may still be on its way.
      if (!(await session.settledStatus((s) => s.poolState === PoolState.SUSPENDED)))
        throw new GpuckptError('SHIM_ERROR', 'the process did not come back to suspended');
      await adoptCopy(session, fds);
    } finally {
      session.close();
    }
  } catch (e) {
    if (held.kept) {
      describeHeld(held.work, { ...held.layout, holder: held.kept }, held.needs);
      return `process ${pid} stays suspended, its pool's copy on the GPU kept by the snapshot holder (${(e as Error).message}; gpuckpt resume ${pid} takes it back)`;
    }
    return `process ${pid} stays suspended, and its pool's copy on the GPU goes with this command (${(e as Error).message})`;
  }
  if (await resumeProcess(pid).then(() => true, () => false)) {
    if (held.kept) await dropKept(pid, held.kept);
    rmSync(held.work, { recursive: true, force: true });
    return `process ${pid} resumed from its pool's copy on the GPU; no image written`;
  }
  return `process ${pid} stays suspended with its pool on the GPU (gpuckpt resume ${pid})`;
}
