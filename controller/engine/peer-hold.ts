/**
 * A migrate's pool moved GPU to GPU instead of through host memory.
 *
 * Before the pause, memory for every chunk in use is allocated on the GPU
 * each of the process's GPUs moves to (native createPeerChunks, exported as
 * fds). In the pause the shim copies the chunks into it device to device
 * (NVLink: 16 GiB in 0.044 s on the H200 hosts, against 0.31 s each way
 * through host memory) and keeps the fds; after the driver's restore onto
 * the new GPUs, the remap maps that memory where the pool was, so nothing
 * is copied back in. See shim/control/peer_hold.h.
 *
 * Not taken (the caller goes through host memory) when a GPU with pool data
 * would stay where it is, the target lacks memory for it, or the shim cannot
 * import or reach it; the process runs on as before (let go again if it
 * had been paused).
 *
 * copyInPlace (checkpoint --leave-running, gpu-snapshot.ts): the copy is
 * made on the process's own GPUs, and the caller keeps fds of it too.
 */
import { closeSync } from 'node:fs';
import { landsOn, type GpuPair } from '../adapters/driver-checkpoint.js';
import type { HeldLayout } from './held-memory.js';
import type { GpuNeed } from './gpu-room.js';
import type { PhaseClock } from '../base/phase-clock.js';
import type { ShimSession } from '../adapters/session.js';
import { DEFAULT_LEASE_MS, MAX_STAGING_FILES, native, type StatusReply } from '../../native/index.js';

export interface HeldOnGpus {
  layout: HeldLayout;
  /** Bytes the shim copied (whole chunks) and how long that took. */
  copiedBytes: number;
  copySeconds: number;
  /** copyInPlace: this process's own fds of the copy, per ordinal (the caller's to close). */
  fds?: number[][];
}

/** The ordinals holding pool data, or why the GPU route cannot serve them (staying: a copy on the same GPU is what is asked). */
function moving(status: StatusReply, devices: string[], to: string[], staying: boolean): { device: number; count: number }[] | string {
  const used = status.devices.flatMap((d, device) => (d.chunksInUse > 0 ? [{ device, count: d.chunksInUse }] : []));
  if (!used.length) return 'the pool is empty';
  if (staying) return used;
  const stays = used.find((u) => to[u.device].toLowerCase() === devices[u.device].toLowerCase());
  if (stays) return `the process's GPU ${stays.device} (${devices[stays.device]}) does not move`;
  return used;
}

/**
 * What a resume needs room for when the pool is held on GPUs: an ordinal
 * that lands where its data is held needs none for its pool (it is there
 * already); one that lands elsewhere needs it all (the remap copies it).
 */
export function besidesHeld(needs: GpuNeed[] | undefined, heldOn: string[], current: string[], pairs: GpuPair[] | undefined): GpuNeed[] | undefined {
  return needs?.map((n, i) => (current[i] && landsOn(current[i], pairs).toLowerCase() === heldOn[i]?.toLowerCase() ? { ...n, poolBytes: '0' } : n));
}

export function closeAll(fds: number[][]): void {
  for (const list of fds) for (const fd of list.splice(0)) closeSync(fd);
}

/** Sends each ordinal's fds in requests of at most GPCK_MAX_STAGING_FILES, in order; last: the final request of all. */
export async function inBatches(fds: number[][], send: (device: number, first: number, batch: number[], last: boolean) => Promise<unknown>): Promise<void> {
  const most = MAX_STAGING_FILES;
  const used = fds.flatMap((list, device) => (list.length ? [device] : []));
  for (const device of used)
    for (let first = 0; first < fds[device].length; first += most)
      await send(device, first, fds[device].slice(first, first + most), device === used.at(-1) && first + most >= fds[device].length);
}

/** A copy on the GPUs (fds per ordinal) handed to the shim of a suspended process as its hold (GPCK_PEER_ADOPT), anew. */
export async function adoptCopy(session: ShimSession, fds: number[][]): Promise<void> {
  await session.peerAdopt(0, 0, []);
  await inBatches(fds, (device, first, batch) => session.peerAdopt(device, first, batch));
}

/**
 * Copies the pool into memory on the GPUs the process moves to and leaves
 * the process paused (the caller then suspends the pool with held 'peer');
 * or returns why not, with the process running as before.
 */
export async function holdOnGpus(
  session: ShimSession,
  status: StatusReply,
  devices: string[],
  pairs: GpuPair[],
  opts: { leaseMs?: number; copyInPlace?: boolean },
  clock?: PhaseClock,
): Promise<HeldOnGpus | { why: string }> {
  const to = devices.map((u) => landsOn(u, pairs)); // where each ordinal's data goes
  const chunk = Number(session.hello.chunkSize);
  const want = moving(status, devices, to, !!opts.copyInPlace);
  if (typeof want === 'string') return { why: want };
  const fds: number[][] = devices.map(() => []);
  const allocate = async (device: number, count: number) => {
    fds[device].push(...(await native().createPeerChunks(to[device], chunk, count)));
  };
  let paused = false;
  try {
    // Settled all, so that what one GPU gave is closed below when another refused.
    const given = await Promise.allSettled(want.map((w) => allocate(w.device, w.count)));
    const refused = given.find((g) => g.status === 'rejected');
    if (refused) throw refused.reason;
    clock?.mark('allocate');
    await session.quiesce(opts.leaseMs ?? DEFAULT_LEASE_MS);
    paused = true;
    // The application may have allocated or freed since the first status.
    const current = await session.status();
    const now = moving(current, devices, to, !!opts.copyInPlace);
    if (typeof now === 'string') throw new Error(now);
    for (const w of now) {
      if (w.count > fds[w.device].length) await allocate(w.device, w.count - fds[w.device].length);
      for (const fd of fds[w.device].splice(w.count)) closeSync(fd);
    }
    await session.peerRoom();
    clock?.mark('quiesce');
    const c0 = performance.now();
    let copied = 0;
    // Each moving ordinal's fds are now its chunks in use; one whose chunks all went meanwhile gives its back.
    const moved = new Set(now.map((w) => w.device));
    fds.forEach((list, device) => moved.has(device) || closeAll([list]));
    await inBatches(fds, async (device, first, batch) => {
      copied += (await session.peerHold(device, first, batch)).bytes;
    });
    const copySeconds = (performance.now() - c0) / 1000;
    clock?.mark('copy');
    const rawBytes = now.reduce((s, w) => s + Number(current.devices[w.device].bytesInUse), 0);
    const layout = { rawBytes, heldBytes: 0, zeroFills: [], devices, groups: [], gpus: to };
    if (!opts.copyInPlace) return { layout, copiedBytes: copied, copySeconds };
    return { layout, copiedBytes: copied, copySeconds, fds: fds.splice(0) };
  } catch (e) {
    // The shim drops whatever it held as the gate reopens.
    if (paused) await session.resume().catch(() => undefined);
    return { why: (e as Error).message };
  } finally {
    closeAll(fds); // the shim holds its own copies of what it took (and copyInPlace's caller its own)
  }
}
