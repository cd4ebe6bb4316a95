/**
 * Snapshots kept in GPU memory (`checkpoint PID --gpu-only --to-gpu [N]`)
 * and rolled back from there (`restore gpu:ID --into PID`): an undo in
 * milliseconds, at the GPU's own copy speed, with nothing through host
 * memory.
 *
 * Taking one: before the pause, one allocation per run of adjacent chunks
 * in use is made on the process's own GPUs (or all on GPU N) and exported;
 * in the pause the shim copies the chunks into them device to device
 * (GPCK_PEER_SNAPSHOT), and the process runs on. Its fds then go to the snapshot holder (adapters/snapshot-holder.ts),
 * a process of its own without a CUDA context, and this controller lets
 * go of its copies; what the snapshot holds (allocations, and which chunk
 * each fd copies) is on file beside the run dir. A rollback takes copies
 * of the fds from the holder, checks the process holds the snapshot's
 * allocations, pauses it, and the shim copies the memory back into those
 * chunks (GPCK_PEER_SNAPSHOT with GPCK_PEER_INTO_POOL).
 *
 * A snapshot goes when released, when its process ends, or, oldest first,
 * when an application on its GPU runs out of memory (the shim asks the
 * holder: shim/control/snapshot_reclaim.c).
 */
import { GpuckptError, isGpuckptError } from '../base/errors.js';
import { PhaseClock, type Phases } from '../base/phase-clock.js';
import { round } from '../base/units.js';
import { ownRunDir, runDirOf } from '../adapters/run-dir.js';
import { startTime } from '../adapters/processes.js';
import { isAlive } from '../base/pid-alive.js';
import { ShimSession } from '../adapters/session.js';
import { SnapshotHolder, type HoldEntry } from '../adapters/snapshot-holder.js';
import { clearStaleRecords, readRecord, recordsDir, removeRecord, writeRecord, type SnapshotRecord } from '../adapters/snapshot-records.js';
import { closeAll } from '../engine/peer-hold.js';
import { whyNoRoomForCopy } from '../engine/gpu-room.js';
import { resolveGpu } from '../engine/suspend.js';
import { afterCutRollback, checkAllocations, checkPoolLayout } from './rollback.js';
import { DEFAULT_LEASE_MS, HoldEntryFlag, MAX_HOLD_ENTRIES, MAX_STAGING_FILES, native, PoolState, type AllocEntry, type ChunkRun } from '../../native/index.js';

/** How a GPU-held snapshot is named on the command line: gpu:ID. */
const PREFIX = 'gpu:';

export function isGpuSnapshotName(text: string): boolean {
  return text.startsWith(PREFIX);
}

function parseName(text: string): bigint {
  const id = text.slice(PREFIX.length);
  if (!/^[1-9][0-9]{0,18}$/.test(id)) throw new GpuckptError('BAD_ARGUMENT', `"${text}" is not a GPU-held snapshot's name (gpu:ID, as gpuckpt ps lists them)`);
  return BigInt(id);
}

export interface GpuSnapshotSummary {
  snapshot: string;
  pid: number;
  /** Where the memory is, per part (GPU UUIDs). */
  gpus: string[];
  /** Bytes of live allocations, and the GPU memory the snapshot holds (whole chunks). */
  rawBytes: number;
  heldBytes: number;
  /** From the pause to the application running again. */
  pauseSeconds: number;
  copySeconds: number;
  copyGBps: number;
  seconds: number;
  phases: Phases;
}

/**
 * The runs of adjacent chunks holding live allocations, per device ordinal,
 * in address order: what the shim counts as its chunks in use.
 */
export function chunkRuns(allocations: readonly AllocEntry[], poolBase: bigint, chunk: bigint, devices: number): ChunkRun[][] {
  const runs: ChunkRun[][] = Array.from({ length: devices }, () => []);
  const chunks = Array.from({ length: devices }, () => new Set<bigint>());
  for (const a of allocations) {
    if (a.size <= 0n || !chunks[a.device]) continue;
    for (let k = (a.addr - poolBase) / chunk; k <= (a.addr + a.size - 1n - poolBase) / chunk; k++) chunks[a.device]!.add(k);
  }
  chunks.forEach((set, device) => {
    for (const k of [...set].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0))) {
      const last = runs[device]!.at(-1);
      const addr = poolBase + k * chunk;
      if (last && last.addr + BigInt(last.chunks) * chunk === addr) last.chunks++;
      else runs[device]!.push({ addr, chunks: 1 });
    }
  });
  return runs;
}

const runsKey = (runs: ChunkRun[][]) => runs.map((list) => list.map((r) => `${r.addr}+${r.chunks}`).join(',')).join(';');

/** Tries before a snapshot gives up on an application whose allocations keep changing under it. */
const LAYOUT_TRIES = 3;

export async function snapshotToGpu(pid: number, opts: { gpu?: string; leaseMs?: number } = {}): Promise<GpuSnapshotSummary> {
  const t0 = performance.now();
  const clock = new PhaseClock('snapshot on the GPU');
  const started = startTime(pid);
  if (!started) throw new GpuckptError('PID_NOT_RUNNING', `process ${pid} is not running`);
  const session = await ShimSession.open(pid);
  let fds: number[][] = [];
  let holder: SnapshotHolder | undefined;
  try {
    const status = await session.status();
    if (status.poolState === PoolState.SUSPENDED) throw new GpuckptError('ALREADY_SUSPENDED', `process ${pid} is suspended: resume it before a snapshot`);
    if (status.poolState !== PoolState.ACTIVE) throw new GpuckptError('BAD_ARGUMENT', `process ${pid}'s pool is not running: nothing to snapshot`);
    if (!status.devices.some((d) => d.chunksInUse > 0)) throw new GpuckptError('BAD_ARGUMENT', `process ${pid}'s pool is empty: nothing to snapshot`);
    const uuids = (await session.devices()).map((d) => d.uuid);
    const to = uuids.map((u) => (opts.gpu === undefined ? u : resolveGpu(opts.gpu).uuid));
    const { chunkSize: chunk, poolBase } = session.hello;
    const noRoom = whyNoRoomForCopy(status, to, chunk, 'a snapshot');
    if (noRoom) throw new GpuckptError('TARGET_NO_MEMORY', `no snapshot in GPU memory: ${noRoom}; process ${pid} runs on untouched (gpuckpt checkpoint --gpu-only -o DIR keeps one in host memory and on disk)`);
    const runDir = runDirOf(pid);
    holder = await SnapshotHolder.connectOrStart(runDir);
    clock.mark('checks');
    const leaseMs = opts.leaseMs ?? DEFAULT_LEASE_MS;
    let runs: ChunkRun[][] = [];
    let allocations: AllocEntry[] = [];
    let pauseStart = 0;
    let copySeconds = 0;
    for (let tries = 1; ; tries++) {
      // One allocation per run of chunks, before the pause: the pause only copies.
      runs = chunkRuns(await session.listAllocations(), poolBase, chunk, uuids.length);
      fds = await allocateRuns(runs, to, chunk, pid);
      clock.mark('allocate');
      pauseStart = performance.now();
      await session.quiesce(leaseMs);
      await session.peerRoom().catch(async (e) => {
        await session.resume();
        throw e;
      }); // each copy brings the application up to GPCK_MAX_STAGING_FILES fds
      allocations = await session.listAllocations();
      if (runsKey(chunkRuns(allocations, poolBase, chunk, uuids.length)) === runsKey(runs)) break;
      await session.resume();
      closeAll(fds);
      if (tries === LAYOUT_TRIES) throw new GpuckptError('LAYOUT_MISMATCH', `no snapshot in GPU memory: process ${pid} changed its allocations during each of ${tries} tries; it runs on untouched`);
    }
    try {
      const c0 = performance.now();
      for (const [device, list] of runs.entries())
        for (let first = 0; first < list.length; first += MAX_STAGING_FILES)
          await session.snapshotCopy(device, list.slice(first, first + MAX_STAGING_FILES), fds[device]!.slice(first, first + MAX_STAGING_FILES), true);
      copySeconds = (performance.now() - c0) / 1000;
    } finally {
      await session.resume();
    }
    const pauseSeconds = (performance.now() - pauseStart) / 1000;
    clock.mark('copy');
    const parts = runs.flatMap((list, device) => (list.length ? [{ device, uuid: to[device]!, fds: fds[device]!, runs: list }] : []));
    const id = await holder.put(pid, BigInt(started), parts.map((p) => ({ uuid: p.uuid, fds: p.fds, sizes: p.runs.map((r) => r.chunks * Number(chunk)) })));
    const heldBytes = parts.reduce((s, p) => s + p.runs.reduce((n, r) => n + r.chunks, 0), 0) * Number(chunk);
    const rawBytes = allocations.reduce((s, a) => s + Number(a.size), 0);
    const record: SnapshotRecord = {
      id: String(id),
      pid,
      startTime: started,
      createdMs: Date.now(),
      poolBase: String(poolBase),
      sliceSize: String(session.hello.sliceSize),
      chunkSize: String(chunk),
      allocations: allocations.map((a) => ({ device: a.device, addr: String(a.addr), size: String(a.size) })),
      parts: parts.map((p) => ({ device: p.device, uuid: p.uuid, runs: p.runs.map((r) => ({ addr: String(r.addr), chunks: r.chunks })) })),
      rawBytes,
      heldBytes,
    };
    try {
      writeRecord(runDir, record);
    } catch (e) {
      await holder.drop(id, pid).catch(() => undefined);
      throw new GpuckptError('IMAGE_WRITE_FAILED', `cannot describe the snapshot in ${recordsDir(runDir)}: ${(e as Error).message}`);
    }
    clock.mark('hand over');
    return {
      snapshot: `${PREFIX}${id}`,
      pid,
      gpus: parts.map((p) => p.uuid),
      rawBytes,
      heldBytes,
      pauseSeconds: round(pauseSeconds, 4),
      copySeconds: round(copySeconds, 4),
      copyGBps: round(heldBytes / 1e9 / Math.max(copySeconds, 1e-9), 1),
      seconds: round((performance.now() - t0) / 1000),
      phases: clock.phases,
    };
  } finally {
    closeAll(fds); // the holder has its own copies now (or the snapshot failed and the memory goes)
    holder?.close();
    session.close();
  }
}

/** One allocation per run on the GPU its ordinal's copy goes to, exported as fds (per ordinal, in run order). */
async function allocateRuns(runs: ChunkRun[][], to: string[], chunk: bigint, pid: number): Promise<number[][]> {
  const given = await Promise.allSettled(runs.map((list, device) => Promise.all(list.map((r) => native().createPeerChunks(to[device]!, r.chunks * Number(chunk), 1)))));
  const fds = given.map((g) => (g.status === 'fulfilled' ? g.value.flat() : []));
  const refused = given.find((g): g is PromiseRejectedResult => g.status === 'rejected');
  if (refused) {
    closeAll(fds);
    throw new GpuckptError('TARGET_NO_MEMORY', `no snapshot in GPU memory: ${(refused.reason as Error).message}; process ${pid} runs on untouched`);
  }
  return fds;
}

export interface GpuRollbackSummary {
  snapshot: string;
  pid: number;
  rawBytes: number;
  pauseSeconds: number;
  copySeconds: number;
  copyGBps: number;
  seconds: number;
}

/** Writes a GPU-held snapshot back into its running process. */
export async function restoreFromGpu(name: string, pid: number, opts: { leaseMs?: number } = {}): Promise<GpuRollbackSummary> {
  const t0 = performance.now();
  const id = parseName(name);
  if (!isAlive(pid)) throw new GpuckptError('PID_NOT_RUNNING', `process ${pid} is not running`);
  const runDir = runDirOf(pid);
  const record = readRecord(runDir, id);
  const holder = SnapshotHolder.connect(runDir);
  const gone = `no GPU-held snapshot ${name} (released, its process ended, or its GPU's memory was needed; gpuckpt ps lists those held)`;
  if (!record || !holder) {
    holder?.close();
    throw new GpuckptError('IMAGE_MISSING', gone);
  }
  const fds: number[][] = [];
  let session: ShimSession | undefined;
  try {
    if (record.pid !== pid) throw new GpuckptError('LAYOUT_MISMATCH', `snapshot ${name} is of process ${record.pid}: a GPU-held snapshot goes back only into the process it was taken of`);
    const entries = (await holder.list()).entries.filter((e) => e.id === id && e.flags & HoldEntryFlag.COMPLETE);
    if (entries.length !== record.parts.length) throw new GpuckptError('IMAGE_MISSING', gone);
    session = await ShimSession.open(pid);
    checkPoolLayout({ base: BigInt(record.poolBase), sliceSize: BigInt(record.sliceSize), chunkSize: BigInt(record.chunkSize) }, session.hello, pid, `snapshot ${name}`);
    const allocations = record.allocations.map((a) => ({ device: a.device, addr: BigInt(a.addr), size: BigInt(a.size) }));
    checkAllocations({ allocations }, await session.listAllocations(), pid);
    for (const [part, p] of record.parts.entries()) fds.push(await holder.take(id, part, p.runs.length));
    const pauseStart = performance.now();
    await session.quiesce(opts.leaseMs ?? DEFAULT_LEASE_MS, true);
    try {
      checkAllocations({ allocations }, await session.listAllocations(), pid); // it may have changed since the first look
      // Each copy brings the application up to GPCK_MAX_STAGING_FILES fds; held mid-rollback it cannot be asked (EPERM), nor need it.
      await session.peerRoom().catch((e) => {
        if (isGpuckptError(e, 'OUT_OF_FDS')) throw e;
      });
    } catch (e) {
      await session.resume().catch(() => undefined); // nothing written yet
      throw e;
    }
    const c0 = performance.now();
    let copied = 0;
    try {
      for (const [part, p] of record.parts.entries()) {
        const runs = p.runs.map((r) => ({ addr: BigInt(r.addr), chunks: r.chunks }));
        for (let first = 0; first < runs.length; first += MAX_STAGING_FILES) {
          const end = Math.min(first + MAX_STAGING_FILES, runs.length);
          const last = part === record.parts.length - 1 && end === runs.length;
          copied += (await session.snapshotCopy(p.device, runs.slice(first, end), fds[part]!.slice(first, end), false, last)).bytes;
        }
      }
    } catch (e) {
      session.close();
      session = undefined;
      throw new GpuckptError(isGpuckptError(e) ? e.code : 'INTERNAL', `${(e as Error).message}; ${await afterCutRollback(pid, name)}`);
    }
    const copySeconds = (performance.now() - c0) / 1000;
    await session.resume();
    return {
      snapshot: name,
      pid,
      rawBytes: record.rawBytes,
      pauseSeconds: round((performance.now() - pauseStart) / 1000, 4),
      copySeconds: round(copySeconds, 4),
      copyGBps: round(copied / 1e9 / Math.max(copySeconds, 1e-9), 1),
      seconds: round((performance.now() - t0) / 1000),
    };
  } finally {
    closeAll(fds);
    session?.close();
    holder.close();
  }
}

export interface HeldSnapshot {
  snapshot: string;
  pid: number;
  /** GPU memory held, per GPU UUID. */
  gpus: { uuid: string; bytes: number }[];
  bytes: number;
  rawBytes?: number;
  createdMs: number;
  /** Still being handed over by a checkpoint. */
  complete: boolean;
}

/**
 * The snapshots the holder of the run dir keeps (none when no holder runs
 * or it cannot be asked: ps lists processes whatever the holder does).
 * Records of snapshots it no longer holds are cleared, only from a whole
 * answer.
 */
export async function listGpuSnapshots(runDir: string = ownRunDir()): Promise<HeldSnapshot[]> {
  let entries: HoldEntry[] | undefined;
  let holder: SnapshotHolder | undefined;
  try {
    holder = SnapshotHolder.connect(runDir);
    entries = holder ? (await holder.list()).entries : [];
  } catch {
    entries = undefined;
  } finally {
    holder?.close();
  }
  const byId = new Map<bigint, HeldSnapshot>();
  // A pool's only copy while CRIU dumps (checkpoint --leave-running) is no snapshot of the user's.
  for (const e of (entries ?? []).filter((e) => !(e.flags & HoldEntryFlag.KEPT))) {
    const s = byId.get(e.id) ?? { snapshot: `${PREFIX}${e.id}`, pid: e.pid, gpus: [], bytes: 0, createdMs: e.createdMs, complete: !!(e.flags & HoldEntryFlag.COMPLETE) };
    s.gpus.push({ uuid: e.uuid, bytes: e.bytes });
    s.bytes += e.bytes;
    byId.set(e.id, s);
  }
  for (const [id, s] of byId) {
    const r = readRecord(runDir, id);
    if (r) s.rawBytes = r.rawBytes;
  }
  if (entries && entries.length < MAX_HOLD_ENTRIES) clearStaleRecords(runDir, new Set([...byId.keys()].map(String)));
  return [...byId.values()].sort((a, b) => a.createdMs - b.createdMs);
}

export interface ReleaseSummary {
  released: number;
  bytes: number;
}

/** Lets snapshots go: by name, or every one of a process (pid), or all (neither). */
export async function releaseGpuSnapshots(names: string[], pid?: number): Promise<ReleaseSummary> {
  const ids = names.map(parseName);
  const runDir = pid !== undefined ? runDirOf(pid) : ownRunDir();
  const holder = SnapshotHolder.connect(runDir);
  if (!holder) {
    if (ids.length) throw new GpuckptError('IMAGE_MISSING', `no GPU-held snapshot ${names[0]}: no snapshot is held`);
    return { released: 0, bytes: 0 };
  }
  try {
    let released = 0;
    let bytes = 0;
    for (const id of ids.length ? ids : [0n]) {
      const rep = await holder.drop(id, id ? 0 : (pid ?? 0));
      released += rep.count;
      bytes += rep.bytes;
      if (id) removeRecord(runDir, id);
    }
    return { released, bytes };
  } finally {
    holder.close();
  }
}

