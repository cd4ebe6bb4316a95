/**
 * Suspend, resume and migrate: the process stays alive while its GPU is
 * freed entirely, and comes back on the same or another GPU of the host.
 *
 * suspend: pause, copy the pool to host memory and write its image
 * (compressed, in /dev/shm unless --to DIR), release the pool's GPU memory
 * (the shim keeps the process held), and let the driver take the rest of
 * its CUDA state to host memory (cuCheckpointProcessLock + Checkpoint). The
 * pool is released only once its image is complete: a write that fails
 * (disk full) leaves the process running, never without its data.
 * resume: driver restore (remapped onto the target GPU when asked), map the
 * pool again at the same addresses, load the image, let the process go.
 */
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { writePoolImage, type CheckpointOptions } from './checkpoint.js';
import { driverFreeze, driverThaw, type GpuPair } from './driver-checkpoint.js';
import { GpuckptError, isGpuckptError } from './errors.js';
import { checkGpuRoom, measureGpuNeeds, readGpuNeeds, writeGpuNeeds } from './gpu-room.js';
import { ImageReader } from './image/index.js';
import { PoolLoader, type LoaderOptions } from './pool-loader.js';
import { ShimSession } from './session.js';
import { formatBytes, round } from './units.js';
import { native, PoolState } from '../native/index.js';

/** The GPUs the process's ordinals stand for now, written beside the held
 * image when a driver restore has moved them and the process was frozen
 * again (a resume that found no memory on its target). */
const CURRENT_DEVICES = 'current-devices.json';
const SUSPEND_LEASE_MS = 10 * 60_000;

export interface SuspendSummary {
  pid: number;
  image: string;
  rawBytes: number;
  storedBytes: number;
  /** From the start to the pool's GPU memory being released. */
  poolReleasedSeconds: number;
  /** From the start to the driver holding no GPU memory for the process. */
  gpuFreeSeconds: number;
  seconds: number;
}

export interface ResumeSummary {
  pid: number;
  image: string;
  device?: string;
  rawBytes: number;
  driverRestoreSeconds: number;
  remapSeconds: number;
  copyGBps: number;
  seconds: number;
}

export function defaultHoldDir(pid: number): string {
  const base = existsSync('/dev/shm') ? '/dev/shm' : tmpdir();
  return join(base, `gpuckpt-${process.getuid?.() ?? 0}`, `suspended-${pid}`);
}

export async function suspendProcess(pid: number, opts: CheckpointOptions & { to?: string } = {}): Promise<SuspendSummary> {
  const t0 = performance.now();
  const image = resolve(opts.to ?? defaultHoldDir(pid));
  if (!opts.to) mkdirSync(dirname(image), { recursive: true, mode: 0o700 });
  const session = await ShimSession.open(pid);
  try {
    const status = await session.status();
    if (status.poolState === PoolState.SUSPENDED)
      throw new GpuckptError('ALREADY_SUSPENDED', `process ${pid} is already suspended (its pool is held at ${status.heldImage})`);
    const needs = measureGpuNeeds(pid, await session.devices(), status);
    // The process stays paused while the image is written (release: keep
    // the gate); a long lease, since compression sends the shim nothing.
    const written = await writePoolImage(
      session,
      image,
      { ...opts, force: opts.to ? opts.force : true, leaseMs: opts.leaseMs ?? SUSPEND_LEASE_MS },
      async () => undefined,
    );
    try {
      writeGpuNeeds(image, needs);
      await session.suspendPool(image);
    } catch (e) {
      // Still running (the gate reopens as the session closes): the image
      // in the default place would only be litter.
      if (!opts.to) rmSync(image, { recursive: true, force: true });
      throw e;
    }
    const poolReleasedAt = performance.now();
    try {
      await driverFreeze(pid);
    } catch (e) {
      // The pool is released and its image complete: bring the process back from it.
      const back = await resumeProcess(pid, { keepImage: true }).then(
        () => true,
        () => false,
      );
      const code = isGpuckptError(e) ? e.code : 'DRIVER_CHECKPOINT';
      if (!back) throw new GpuckptError(code, `suspend failed and process ${pid} could not be resumed; its pool is held at ${image} (gpuckpt resume ${pid}): ${(e as Error).message}`);
      throw new GpuckptError(code, `suspend failed, process ${pid} resumed: ${(e as Error).message}`);
    }
    const gpuFree = performance.now();
    return {
      pid,
      image,
      rawBytes: written.rawBytes,
      storedBytes: written.storedBytes,
      poolReleasedSeconds: round((poolReleasedAt - t0) / 1000),
      gpuFreeSeconds: round((gpuFree - t0) / 1000),
      seconds: round((performance.now() - t0) / 1000),
    };
  } finally {
    session.close();
  }
}

export async function resumeProcess(
  pid: number,
  opts: LoaderOptions & { device?: string; keepImage?: boolean; image?: string } = {},
): Promise<ResumeSummary> {
  const t0 = performance.now();
  const session = await ShimSession.open(pid);
  let reader: ImageReader | undefined;
  let loader: PoolLoader | undefined;
  try {
    const status = await session.status();
    if (status.poolState !== PoolState.SUSPENDED) throw new GpuckptError('NOT_SUSPENDED', `process ${pid} is not suspended`);
    // A process restored by CRIU remembers where its pool was held while
    // the image was being made; the image's final place is given instead.
    const image = opts.image ?? status.heldImage;
    reader = await ImageReader.open(image);
    const current = currentDevices(image) ?? reader.manifest.devices.map((d) => d.uuid);
    const target = opts.device === undefined ? undefined : resolveGpu(opts.device);
    const pairs = target ? gpuPairs(current, target.uuid) : undefined;
    checkGpuRoom(pid, readGpuNeeds(image), current, pairs, `process ${pid} stays suspended; resume it with --device on another GPU`);

    try {
      await driverThaw(pid, pairs);
    } catch (e) {
      // A restore the driver refused leaves the process checkpointed.
      const where = target ? `GPU ${target.uuid}` : 'the GPU';
      if (isGpuckptError(e, 'GPU_OUT_OF_MEMORY'))
        throw new GpuckptError('TARGET_NO_MEMORY', `${where} has no room for process ${pid}: it stays suspended; resume it with --device on another GPU`);
      throw new GpuckptError(isGpuckptError(e) ? e.code : 'DRIVER_CHECKPOINT', `${(e as Error).message}: process ${pid} stays suspended`);
    }
    const thawed = performance.now();
    try {
      await session.remapPool();
    } catch (e) {
      if (!isGpuckptError(e, 'GPU_OUT_OF_MEMORY')) throw e;
      // Stay suspended: free the GPU again, and remember where the driver put us.
      const now = (await session.devices()).map((d) => d.uuid);
      writeFileSync(join(image, CURRENT_DEVICES), JSON.stringify(now));
      await driverFreeze(pid);
      const need = formatBytes(reader.manifest.data.rawBytes);
      throw new GpuckptError('TARGET_NO_MEMORY', `${target ? `GPU ${target.uuid}` : 'the GPU'} has no room for the pool (${need}): process ${pid} stays suspended; resume it with --device on another GPU`);
    }
    const remapped = performance.now();
    loader = await PoolLoader.prepare(session, reader, opts);
    const copySeconds = await loader.copyIn(session);
    await session.resume();
    const raw = Number(reader.manifest.data.rawBytes);
    if (!opts.keepImage && image === defaultHoldDir(pid)) rmSync(image, { recursive: true, force: true });
    return {
      pid,
      image,
      device: target?.uuid,
      rawBytes: raw,
      driverRestoreSeconds: round((thawed - t0) / 1000),
      remapSeconds: round((remapped - thawed) / 1000),
      copyGBps: round(raw / 1e9 / Math.max(copySeconds, 1e-9), 2),
      seconds: round((performance.now() - t0) / 1000),
    };
  } finally {
    session.close();
    await loader?.close();
    await reader?.close();
  }
}

export interface MigrateSummary {
  pid: number;
  device: string;
  rawBytes: number;
  /** The application's downtime: from its pause until it runs on the new GPU. */
  downtimeSeconds: number;
  suspend: SuspendSummary;
  resume: ResumeSummary;
}

export async function migrateProcess(pid: number, device: string, opts: CheckpointOptions = {}): Promise<MigrateSummary> {
  resolveGpu(device); // refuse a bad target before the process is touched
  const t0 = performance.now();
  const suspend = await suspendProcess(pid, opts);
  const resume = await resumeProcess(pid, { ...opts, device });
  return {
    pid,
    device: resume.device!,
    rawBytes: suspend.rawBytes,
    downtimeSeconds: round((performance.now() - t0) / 1000),
    suspend,
    resume,
  };
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

function currentDevices(image: string): string[] | undefined {
  try {
    return JSON.parse(readFileSync(join(image, CURRENT_DEVICES), 'utf8')) as string[];
  } catch {
    return undefined;
  }
}
