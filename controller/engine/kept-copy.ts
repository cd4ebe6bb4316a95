/**
 * A pool's copy on its GPU (checkpoint --leave-running, gpu-snapshot.ts)
 * kept by the snapshot holder while CRIU dumps the process: the shim has
 * let its fds go, and without a second keeper a controller that died then
 * took the pool's only copy with it. Kept (GPCK_HOLD_KEEP: never
 * reclaimed), the copy is described at the place the shim looks, and a
 * resume hands it back to the shim (adoptKept) before mapping it.
 */
import { mkdirSync } from 'node:fs';
import { runningStartTime } from '../adapters/processes.js';
import { runDirOf } from '../adapters/run-dir.js';
import type { ShimSession } from '../adapters/session.js';
import { SnapshotHolder } from '../adapters/snapshot-holder.js';
import { GpuckptError } from '../base/errors.js';
import { log } from '../base/log.js';
import type { GpuNeed } from './gpu-room.js';
import { describeHeld, type HeldLayout } from './held-memory.js';
import { adoptCopy, closeAll } from './peer-hold.js';

/**
 * The copy's fds (per ordinal, chunk bytes each) handed to the holder as
 * well, and described at where (with the holder's id) for a resume.
 * Returns the id; undefined, and a warning, when the holder cannot take
 * it: the checkpoint then goes on as before, the copy held here only.
 */
export async function keepCopy(pid: number, fds: number[][], gpus: string[], chunk: bigint, where: string, layout: HeldLayout, needs: GpuNeed[]): Promise<string | undefined> {
  let holder: SnapshotHolder | undefined;
  try {
    const started = runningStartTime(pid);
    if (started === undefined) throw new GpuckptError('PID_NOT_RUNNING', `process ${pid} is not running`);
    holder = await SnapshotHolder.connectOrStart(runDirOf(pid));
    const parts = fds.flatMap((list, device) => (list.length ? [{ uuid: gpus[device]!, fds: list, sizes: list.map(() => Number(chunk)) }] : []));
    const id = String(await holder.put(pid, BigInt(started), parts, true));
    mkdirSync(where, { recursive: true, mode: 0o700 });
    describeHeld(where, { ...layout, holder: id }, needs);
    return id;
  } catch (e) {
    log('warn', 'checkpoint --leave-running', `the snapshot holder could not keep the pool's copy while CRIU dumps (${(e as Error).message}): a controller killed meanwhile would lose it`);
    return undefined;
  } finally {
    holder?.close();
  }
}

/** The kept copy (snapshot id, on gpus by ordinal) back in the shim of a suspended process, as a suspend's hold on GPUs. */
export async function adoptKept(session: ShimSession, pid: number, id: string, gpus: string[]): Promise<void> {
  const holder = SnapshotHolder.connect(runDirOf(pid));
  const gone = new GpuckptError('IMAGE_MISSING', `process ${pid} stays suspended: its pool's copy on the GPU, which the snapshot holder kept (snapshot ${id}), is gone`);
  if (!holder) throw gone;
  const fds: number[][] = gpus.map(() => []);
  try {
    const entries = (await holder.list()).entries.filter((e) => String(e.id) === id);
    if (!entries.length) throw gone;
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
