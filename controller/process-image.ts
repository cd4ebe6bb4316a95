/**
 * Whole-process checkpoint and restore: gpuckpt carries the pool, the
 * driver's checkpoint API the rest of the CUDA state, CRIU the process.
 *
 * checkpoint: suspend into a hidden working directory (pool image written,
 * pool released, driver state to host memory), `criu dump` into its criu/,
 * then rename it to the image's name: the image is complete or absent. With
 * --leave-running the process is resumed from the pool image afterwards; a
 * failing dump resumes it too.
 * restore: `criu restore`, then the resume path (driver restore, remapped
 * to the target GPU when asked; pool mapped at the same addresses and
 * loaded; gate opened). The image is read, never consumed.
 */
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import type { CheckpointOptions } from './checkpoint.js';
import { criuDump, criuRestore, criuRestoreError, findCriu, isShellJob, type Criu } from './criu.js';
import { GpuckptError, isGpuckptError } from './errors.js';
import { openChain } from './image/chain.js';
import { ImageReader, removeStaleTempDirs } from './image/index.js';
import { fsyncDir, syncTree } from './image/durable.js';
import { osErrorText } from './image/os-error.js';
import { tempDirName } from './image/temp-dirs.js';
import { faultPoint } from './faults.js';
import { isAlive } from './processes.js';
import { PoolLoader } from './pool-loader.js';
import { checkGpuRoom, readGpuNeeds } from './gpu-room.js';
import { gpuPairs, resolveGpu, resumeProcess, suspendProcess, type ResumeSummary } from './suspend.js';
import { round } from './units.js';
import { checkpointLeavingRunning } from './gpu-snapshot.js';
import type { Phases } from './phase-clock.js';
import { native } from '../native/index.js';

const CRIU_DIR = 'criu';
/** What restore needs to know about the dump, beside CRIU's own files. */
const PROCESS_INFO = 'gpuckpt-process.json';

export interface ProcessCheckpointSummary {
  image: string;
  pid: number;
  rawBytes: number;
  storedBytes: number;
  leftRunning: boolean;
  criuVersion: string;
  gpuFreeSeconds: number;
  dumpSeconds: number;
  /** fsync of CRIU's files, after the dump (and after a --leave-running process runs again). */
  syncSeconds: number;
  seconds: number;
  /** --leave-running: from the application's pause until it ran again. */
  pauseSeconds?: number;
  /** --leave-running: the pool copied on its GPU for the pause ('gpu', gpu-snapshot.ts) or through host memory, and why. */
  route?: 'gpu' | 'host';
  whyThroughHost?: string;
  /** Steps of a 'gpu' route's pause, in order. */
  phases?: Phases;
}

export async function checkpointProcess(
  pid: number,
  out: string,
  opts: CheckpointOptions & { leaveRunning?: boolean; criu?: string } = {},
): Promise<ProcessCheckpointSummary> {
  const t0 = performance.now();
  const criu = findCriu(opts.criu); // refuse before touching the process
  const target = resolve(out);
  if (existsSync(target)) {
    if (!opts.force) throw new GpuckptError('IMAGE_EXISTS', `${target} already exists (use --force to replace it)`);
    // --force replaces an image, never other data at a mistyped path.
    if (!existsSync(join(target, 'manifest'))) throw new GpuckptError('IMAGE_EXISTS', `${target} exists and is not a gpuckpt image: not replacing it`);
  }
  await removeStaleTempDirs(dirname(target));
  // Owned by the application, not by this controller: while CRIU dumps it,
  // the application is suspended with its pool held in this directory only,
  // and a controller killed meanwhile must not make it stale for the next
  // writer's cleanup.
  const work = join(dirname(target), tempDirName(basename(target), pid));
  const shellJob = isShellJob(pid);
  let whyThroughHost: string | undefined;
  if (opts.leaveRunning && !opts.live) {
    const left = await checkpointLeavingRunning(pid, work, CRIU_DIR, criu, shellJob, { ...opts, finalImage: target });
    if (!('whyNot' in left)) {
      writeProcessInfo(work, { pid, shellJob, criuVersion: criu.version });
      const s0 = performance.now();
      await makeDurable(work, pid, true);
      const syncSeconds = (performance.now() - s0) / 1000;
      await publish(work, target, !!opts.force);
      return {
        image: target,
        pid,
        rawBytes: left.image.poolBytes,
        storedBytes: left.image.storedBytes,
        leftRunning: true,
        criuVersion: criu.version,
        gpuFreeSeconds: left.gpuFreeSeconds,
        dumpSeconds: left.dumpSeconds,
        syncSeconds: round(syncSeconds),
        seconds: round((performance.now() - t0) / 1000),
        pauseSeconds: left.pauseSeconds,
        route: 'gpu',
        phases: left.phases,
      };
    }
    whyThroughHost = left.whyNot;
  }
  const suspendStart = performance.now();
  const suspended = await suspendProcess(pid, { ...opts, to: work, force: false, kind: 'process', finalImage: target });
  const d0 = performance.now();
  try {
    mkdirSync(join(work, CRIU_DIR), { mode: 0o700 });
    criuDump(criu, pid, join(work, CRIU_DIR), { leaveRunning: !!opts.leaveRunning, shellJob });
    writeProcessInfo(work, { pid, shellJob, criuVersion: criu.version });
  } catch (e) {
    // The process is still there (frozen): bring it back, then drop the half
    // image (kept if the process could not come back: it holds its data).
    const back = await resumeProcess(pid, { keepImage: true }).then(
      () => true,
      () => false,
    );
    if (back) rmSync(work, { recursive: true, force: true });
    throw new GpuckptError('CRIU_FAILED', `${(e as Error).message}; ${back ? `process ${pid} resumed` : `process ${pid} stays suspended with its pool at ${work} (gpuckpt resume ${pid})`}`);
  }
  const dumpSeconds = (performance.now() - d0) / 1000;
  let resumeFailure: unknown;
  if (opts.leaveRunning) await resumeProcess(pid, { keepImage: true }).catch((e) => (resumeFailure = e));
  const runsAgain = performance.now();
  // CRIU leaves its files to the page cache; the pool image is durable
  // already, and the image is published only once CRIU's part is too.
  const s0 = performance.now();
  await makeDurable(work, pid, !!opts.leaveRunning && !resumeFailure);
  const syncSeconds = (performance.now() - s0) / 1000;
  await publish(work, target, !!opts.force);
  if (resumeFailure) throw resumeFailure;
  return {
    image: target,
    pid,
    rawBytes: suspended.rawBytes,
    storedBytes: suspended.storedBytes,
    leftRunning: !!opts.leaveRunning,
    criuVersion: criu.version,
    gpuFreeSeconds: suspended.gpuFreeSeconds,
    dumpSeconds: round(dumpSeconds),
    syncSeconds: round(syncSeconds),
    seconds: round((performance.now() - t0) / 1000),
    ...(opts.leaveRunning ? { pauseSeconds: round((runsAgain - suspendStart) / 1000 - suspended.pauseStartSeconds, 4), route: 'host' as const, whyThroughHost } : {}),
  };
}

/** What restore needs to know about the dump, beside CRIU's own files, in work's CRIU directory. */
function writeProcessInfo(work: string, info: { pid: number; shellJob: boolean; criuVersion: string }): void {
  writeFileSync(join(work, CRIU_DIR, PROCESS_INFO), JSON.stringify(info), { mode: 0o600 });
}

/** The complete image at work becomes target (replacing an image there with force). */
async function publish(work: string, target: string, force: boolean): Promise<void> {
  if (force && existsSync(target)) rmSync(target, { recursive: true, force: true });
  renameSync(work, target);
  await fsyncDir(dirname(target));
}

/**
 * fsync of CRIU's files in work. If that fails the image is not published:
 * a process left running loses nothing (work is removed); one CRIU ended
 * has no other copy, so work is kept and named.
 */
async function makeDurable(work: string, pid: number, leftRunning: boolean): Promise<void> {
  try {
    faultPoint('criu-sync');
    await syncTree(join(work, CRIU_DIR));
    await fsyncDir(work);
  } catch (e) {
    if (leftRunning) rmSync(work, { recursive: true, force: true });
    const where = leftRunning ? `process ${pid} runs on; no image written` : `process ${pid} is gone; its image is kept, not known durable, at ${work}`;
    throw new GpuckptError('IMAGE_WRITE_FAILED', `cannot make CRIU's files durable: ${osErrorText(e)}; ${where}`, { cause: e });
  }
}

export interface ProcessRestoreSummary {
  image: string;
  pid: number;
  criuSeconds: number;
  /** Decompressing the pool image into staging, while CRIU ran. */
  loadSeconds: number;
  resume: ResumeSummary;
  /** Until the application runs again with all its data. */
  seconds: number;
  /** Freeing the staging memory afterwards (the application is already running). */
  cleanupSeconds: number;
  /** Without --detach: the application's exit status once it ends. */
  exitCode?: number | null;
  signal?: string | null;
}

export async function restoreProcess(
  image: string,
  opts: { device?: string; detach?: boolean; criu?: string; stagingLimit?: bigint; workers?: number; progress?: boolean } = {},
): Promise<ProcessRestoreSummary> {
  const t0 = performance.now();
  // The pool image and the chain of its parents check out before anything runs.
  const reader = await ImageReader.open(image);
  let loader: PoolLoader | undefined;
  // Closed here until the loader takes them.
  let parents: ImageReader[] | undefined;
  try {
    const chain = await openChain(reader);
    parents = chain.parents;
    const criu = findCriu(opts.criu);
    const m = reader.manifest;
    const dir = join(reader.path, CRIU_DIR);
    if (m.kind !== 'process' || !existsSync(join(dir, PROCESS_INFO)))
      throw new GpuckptError('IMAGE_NOT_AN_IMAGE', `${reader.path} holds the GPU memory only (a --gpu-only image): restore it into a running process with --into PID`);
    const info = JSON.parse(readFileSync(join(dir, PROCESS_INFO), 'utf8')) as { pid: number; shellJob: boolean };
    const target = opts.device === undefined ? undefined : resolveGpu(opts.device);
    refuseOtherChip(m.devices.map((d) => d.name), target?.name);
    if (isAlive(info.pid)) throw new GpuckptError('PID_IN_USE', `process ${info.pid} is running: CRIU restores a process under its own PID, which must be free`);
    const taken = m.devices.map((d) => d.uuid);
    checkGpuRoom(info.pid, readGpuNeeds(reader.path), taken, target ? gpuPairs(taken, target.uuid) : undefined, 'nothing was restored; choose another GPU with --device');

    // The pool image is decompressed while CRIU brings the process back:
    // neither waits for the other.
    parents = undefined;
    loader = await PoolLoader.open(reader, opts, chain);
    const restored = await restoreWithCriu(criu, dir, info.shellJob, !!opts.detach, reader.path);
    const criuSeconds = (performance.now() - t0) / 1000;
    try {
      await loader.whenReady();
    } catch (e) {
      // Without its GPU data the process cannot run, and it holds the PID
      // another restore needs: it is ended (the image is as it was).
      endProcess(info.pid);
      throw new GpuckptError(isGpuckptError(e) ? e.code : 'INTERNAL', `${(e as Error).message}; the restored process ${info.pid} was ended`);
    }
    const resume = await resumeProcess(info.pid, { loader, keepImage: true, device: opts.device, progress: opts.progress });
    const seconds = (performance.now() - t0) / 1000;
    const c0 = performance.now();
    const loadSeconds = loader.loadSeconds;
    await loader.close();
    loader = undefined;
    const summary: ProcessRestoreSummary = {
      image: reader.path,
      pid: info.pid,
      criuSeconds: round(criuSeconds),
      loadSeconds: round(loadSeconds),
      resume,
      seconds: round(seconds),
      cleanupSeconds: round((performance.now() - c0) / 1000),
    };
    if (!opts.detach) {
      const end = await restored.done;
      summary.exitCode = end.code;
      summary.signal = end.signal;
    }
    return summary;
  } finally {
    await Promise.all((parents ?? []).map((p) => p.close()));
    await loader?.close();
    await reader.close();
  }
}

/**
 * `criu restore` of dir: returns once the process is back (CRIU wrote the
 * pidfile, or, detached, exited), with CRIU's exit to come (attached: when
 * the application ends).
 */
async function restoreWithCriu(criu: Criu, dir: string, shellJob: boolean, detach: boolean, image: string): Promise<{ done: Promise<ChildExit> }> {
  const pidFile = join(dir, `restore-${process.pid}.pid`);
  const child = criuRestore(criu, dir, { detach, shellJob, pidFile });
  let exited: ChildExit | undefined;
  const done = new Promise<ChildExit>((res) => child.on('exit', (code, signal) => res((exited = { code, signal }))));
  // Restored once CRIU wrote the pidfile (attached) or exited (detached).
  while (!existsSync(pidFile) && !exited) await new Promise((r) => setTimeout(r, 20));
  if (detach) await done;
  if (!existsSync(pidFile) || (exited && exited.code !== 0 && detach))
    throw new GpuckptError('CRIU_FAILED', `criu restore of ${image} failed: ${criuRestoreError(dir)} (log: ${join(dir, 'restore.log')})`);
  rmSync(pidFile, { force: true });
  // Wrapped: an async function returning the promise itself would wait for it.
  return { done };
}

type ChildExit = { code: number | null; signal: string | null };

/** SIGKILL to a process this restore brought back (gone already: nothing to do). */
function endProcess(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // ESRCH: it ended on its own
  }
}

/** An image restores only onto the chip type it was taken on. */
function refuseOtherChip(imageGpus: string[], targetName: string | undefined): void {
  const host = native().listGpus();
  const want = targetName ?? host[0]?.name;
  const taken = imageGpus[0];
  if (taken && want && taken !== want)
    throw new GpuckptError('OTHER_CHIP', `the image was taken on ${taken}; this GPU is ${want}: restore it on the same chip type`);
}
