/**
 * Room on the target GPU, checked before the driver is asked to restore a
 * process there. A driver restore refused for lack of memory cannot be
 * taken back: on driver 580 every later restore of that process fails
 * (CUresult 304), wherever it is aimed. So gpuckpt measures what a process
 * holds when it suspends it (NVML: the process's memory on each GPU; the
 * shim: the part of it that is the pool), and refuses a target whose free
 * memory is short, leaving the process suspended and able to go elsewhere.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { GpuckptError } from '../base/errors.js';
import { landsOn, type GpuPair } from '../adapters/driver-checkpoint.js';
import { formatBytes } from '../base/units.js';
import { native, type DeviceInfo, type StatusReply } from '../../native/index.js';

const NEEDS_FILE = 'gpu-needs.json';
/** A CUDA context with cuBLAS-sized modules, when NVML cannot see the process. */
const CONTEXT_ESTIMATE = 768n << 20n;
/** The driver's own working memory during a restore. */
const HEADROOM = 64n << 20n;

/** What one of the process's GPUs must give it back, by its ordinal there. */
export interface GpuNeed {
  uuid: string;
  poolBytes: string;
  /** Memory outside the pool (contexts, modules, unrouted allocations); absent when NVML could not say. */
  otherBytes?: string;
}

/**
 * Taken while the pool is still mapped: NVML's figure for the process
 * includes it. A GPU where NVML lists the process nowhere gives no figure;
 * where it lists it on other GPUs only, it holds nothing on this one.
 */
export function measureGpuNeeds(pid: number, devices: DeviceInfo[], status: StatusReply): GpuNeed[] {
  const held = native().processGpuMemory(pid);
  const anyPool = status.devices.some((d) => d.bytesMapped > 0n);
  return devices.map((d, i) => {
    const pool = status.devices[i]?.bytesMapped ?? 0n;
    const need: GpuNeed = { uuid: d.uuid, poolBytes: String(pool) };
    if (held) {
      const total = held.find((h) => h.uuid.toLowerCase() === d.uuid.toLowerCase())?.bytes ?? 0n;
      need.otherBytes = String(total > pool ? total - pool : 0n);
    } else if (pool === 0n && (anyPool || i > 0)) {
      // Unseen by NVML: a context is assumed only where the process has memory (or on its first GPU).
      need.otherBytes = '0';
    }
    return need;
  });
}

export function writeGpuNeeds(dir: string, needs: GpuNeed[]): void {
  writeFileSync(join(dir, NEEDS_FILE), JSON.stringify(needs), { mode: 0o600 });
}

/** Absent in images made before it was recorded: no check then. */
export function readGpuNeeds(dir: string): GpuNeed[] | undefined {
  try {
    const needs = JSON.parse(readFileSync(join(dir, NEEDS_FILE), 'utf8')) as GpuNeed[];
    return Array.isArray(needs) ? needs : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Throws TARGET_NO_MEMORY when a GPU the process would land on has less
 * free memory than it needs. current: the GPU each of the process's
 * ordinals stands for now; pairs: where the restore moves them. Without
 * NVML there is nothing to ask, and the driver's own refusal stands.
 */
export function checkGpuRoom(pid: number, needs: GpuNeed[] | undefined, current: string[], pairs: GpuPair[] | undefined, then: string): void {
  if (!needs?.length) return;
  const free = native().gpuMemory();
  if (!free) return;
  const wanted = new Map<string, { bytes: bigint; pool: bigint; other: bigint; estimated: boolean }>();
  needs.forEach((n, i) => {
    const from = current[i] ?? n.uuid;
    const to = landsOn(from, pairs).toLowerCase();
    const pool = BigInt(n.poolBytes);
    const other = n.otherBytes === undefined ? CONTEXT_ESTIMATE : BigInt(n.otherBytes);
    const w = wanted.get(to) ?? { bytes: HEADROOM, pool: 0n, other: 0n, estimated: false };
    wanted.set(to, { bytes: w.bytes + pool + other, pool: w.pool + pool, other: w.other + other, estimated: w.estimated || n.otherBytes === undefined });
  });
  for (const [uuid, w] of wanted) {
    const gpu = free.find((g) => g.uuid.toLowerCase() === uuid);
    if (!gpu || gpu.free >= w.bytes) continue;
    const other = `${w.estimated ? 'about ' : ''}${formatBytes(w.other)} of CUDA context`;
    throw new GpuckptError(
      'TARGET_NO_MEMORY',
      `GPU ${gpu.uuid} has ${formatBytes(gpu.free)} free; process ${pid} needs ${formatBytes(w.bytes)} there (pool ${formatBytes(w.pool)}, ${other}): ${then}`,
    );
  }
}

/** An image restores only onto the chip type it was taken on. */
export function refuseOtherChip(imageGpus: string[], targetName: string | undefined): void {
  const host = native().listGpus();
  const want = targetName ?? host[0]?.name;
  const taken = imageGpus[0];
  if (taken && want && taken !== want)
    throw new GpuckptError('OTHER_CHIP', `the image was taken on ${taken}; this GPU is ${want}: restore it on the same chip type`);
}

/** What a GPU keeps free beside a copy made on it while the application runs on (and allocates). */
const SPARE_SHARE = 0.05;
const SPARE_MIN = 2n << 30n;

/**
 * Why the GPUs lack room for a copy of the pool's chunks in use, ordinal i's
 * onto GPU to[i], with 5 % of each GPU (at least 2 GiB) to spare; undefined
 * when they have it, or NVML cannot say (the allocation itself will). what:
 * the copy, in the reason.
 */
export function whyNoRoomForCopy(status: StatusReply, to: string[], chunk: bigint, what: string): string | undefined {
  const free = native().gpuMemory();
  const want = new Map<string, bigint>();
  status.devices.forEach((d, i) => d.chunksInUse && want.set(to[i]!, (want.get(to[i]!) ?? 0n) + BigInt(d.chunksInUse) * chunk));
  for (const [uuid, bytes] of want) {
    const gpu = free?.find((g) => g.uuid.toLowerCase() === uuid.toLowerCase());
    if (!gpu) continue;
    const share = BigInt(Math.round(Number(gpu.total) * SPARE_SHARE));
    const keep = share > SPARE_MIN ? share : SPARE_MIN;
    if (gpu.free < bytes + keep) return `GPU ${gpu.uuid} has ${formatBytes(gpu.free)} free, not room for ${what} of ${formatBytes(bytes)} and ${formatBytes(keep)} to spare`;
  }
  return undefined;
}
