/**
 * A pool's only copy kept by the snapshot holder while CRIU dumps the
 * process: its copy on its GPU (checkpoint --leave-running,
 * gpu-snapshot.ts), or a suspended pool's staging in host memory (a
 * whole-process checkpoint, while its pool image is written). The shim has
 * let its fds go, and without a second keeper a controller that died then
 * took the pool's only copy with it. Kept (GPCK_HOLD_KEEP: never
 * reclaimed), the copy is described at the place the shim looks, and a
 * resume hands it back to the shim (adoptKept, takeKeptStaging) first.
 */
import { mkdirSync } from 'node:fs';
import { runningStartTime } from '../adapters/processes.js';
import { runDirOf } from '../adapters/run-dir.js';
import type { ShimSession, StagingMemory } from '../adapters/session.js';
import { SnapshotHolder, type HoldEntry, type PartToHold } from '../adapters/snapshot-holder.js';
import { GpuckptError } from '../base/errors.js';
import { log } from '../base/log.js';
import type { GpuNeed } from './gpu-room.js';
import { describeHeld, type HeldLayout } from './held-memory.js';
import { stagingParts } from './staging-files.js';
import { adoptCopy, closeAll } from './peer-hold.js';

/** What a part held in host memory is filed under in the holder: no GPU's UUID. */
const HOST_MEMORY = '00000000-0000-0000-0000-000000000000';

/**
 * The copy's fds (per ordinal, chunk bytes each) handed to the holder as
 * well, and described at where (with the holder's id) for a resume.
 * Returns the id; undefined, and a warning, when the holder cannot take
 * it: the checkpoint then goes on as before, the copy held here only.
 */
export async function keepCopy(pid: number, fds: number[][], gpus: string[], chunk: bigint, where: string, layout: HeldLayout, needs: GpuNeed[]): Promise<string | undefined> {
  const parts = fds.flatMap((list, device) => (list.length ? [{ uuid: gpus[device]!, fds: list, sizes: list.map(() => Number(chunk)) }] : []));
  try {
    return await putKept(pid, parts, where, layout, needs);
  } catch (e) {
    log('warn', 'checkpoint --leave-running', `the snapshot holder could not keep the pool's copy while CRIU dumps (${(e as Error).message}): a controller killed meanwhile would lose it`);
    return undefined;
  }
}

/**
 * A suspended pool's staging (the shim's memfds, which hold its data)
 * handed to the holder, and described at where for a resume: the shim
 * can then let go of its copy before CRIU dumps, while the pool image is
 * written from this process's. Returns the id; undefined, and a warning,
 * when the holder cannot take it (the shim keeps its copy).
 */
export async function keepStaging(pid: number, staging: StagingMemory, where: string, layout: HeldLayout, needs: GpuNeed[]): Promise<string | undefined> {
  const sizes = stagingParts(staging.size, staging.fileBytes);
  const files = { size: staging.size, fileBytes: staging.fileBytes };
  try {
    return await putKept(pid, [{ uuid: HOST_MEMORY, fds: staging.fds, sizes }], where, { ...layout, files }, needs);
  } catch (e) {
    log('warn', 'checkpoint', `the snapshot holder could not keep process ${pid}'s pool while CRIU dumps (${(e as Error).message}): its pool image is written first`);
    return undefined;
  }
}

/** parts kept by the holder (never reclaimed) for pid, and described at where with the holder's id; the id. */
async function putKept(pid: number, parts: PartToHold[], where: string, layout: HeldLayout, needs: GpuNeed[]): Promise<string> {
  let holder: SnapshotHolder | undefined;
  try {
    const started = runningStartTime(pid);
    if (started === undefined) throw new GpuckptError('PID_NOT_RUNNING', `process ${pid} is not running`);
    holder = await SnapshotHolder.connectOrStart(runDirOf(pid));
    const id = String(await holder.put(pid, BigInt(started), parts, true));
    mkdirSync(where, { recursive: true, mode: 0o700 });
    describeHeld(where, { ...layout, holder: id }, needs);
    return id;
  } finally {
    holder?.close();
  }
}

/** The holder of pid's run directory and its entries of snapshot id (one per part), or gone when it has none; the caller closes the holder. */
async function openKept(pid: number, id: string, gone: GpuckptError): Promise<{ holder: SnapshotHolder; entries: HoldEntry[] }> {
  const holder = SnapshotHolder.connect(runDirOf(pid));
  if (!holder) throw gone;
  try {
    const entries = (await holder.list()).entries.filter((e) => String(e.id) === id);
    if (!entries.length) throw gone;
    return { holder, entries };
  } catch (e) {
    holder.close();
    throw e;
  }
}

/** Copies of the staging fds the holder keeps for pid (keepStaging), laid out as files says: the caller's to close. */
export async function takeKeptStaging(pid: number, id: string, files: { size: number; fileBytes: number }): Promise<StagingMemory> {
  const { holder, entries } = await openKept(pid, id, new GpuckptError('IMAGE_MISSING', `process ${pid} stays suspended: its pool's data, which the snapshot holder kept (snapshot ${id}), is gone`));
  try {
    const [e] = entries as [HoldEntry];
    return { fds: await holder.take(BigInt(id), e.part, e.fds), ...files, registerNs: 0 };
  } finally {
    holder.close();
  }
}

/** The kept copy (snapshot id, on gpus by ordinal) back in the shim of a suspended process, as a suspend's hold on GPUs. */
export async function adoptKept(session: ShimSession, pid: number, id: string, gpus: string[]): Promise<void> {
  const { holder, entries } = await openKept(pid, id, new GpuckptError('IMAGE_MISSING', `process ${pid} stays suspended: its pool's copy on the GPU, which the snapshot holder kept (snapshot ${id}), is gone`));
  const fds: number[][] = gpus.map(() => []);
  try {
    for (const e of entries) {
      const device = gpus.findIndex((u) => u.toLowerCase() === e.uuid.toLowerCase());
      if (device < 0) throw new GpuckptError('INTERNAL', `snapshot ${id} holds memory on ${e.uuid}, which process ${pid} did not use`);
      fds[device] = await holder.take(BigInt(id), e.part, e.fds);
    }
    await adoptCopy(session, fds);
  } finally {
    closeAll(fds); // the shim has its own copies now
    holder.close();
  }
}

/** The holder lets the kept copy go (the process runs on its pool again); a failure leaves it until the process ends. */
export async function dropKept(pid: number, id: string): Promise<void> {
  const holder = SnapshotHolder.connect(runDirOf(pid));
  try {
    await holder?.drop(BigInt(id), pid);
  } catch {
    // released when the process ends
  } finally {
    holder?.close();
  }
}
