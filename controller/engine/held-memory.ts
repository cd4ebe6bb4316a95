/**
 * The pool's data held in host memory while a process is suspended. The
 * staging memory the DMA filled stays with the shim (unpinned and unmapped,
 * only its memfd), and a small layout file in the hold directory says where
 * each piece of the pool lies in it. Suspend releases the GPU as soon as the
 * DMA ends, and resume is DMA only: nothing is compressed on the way out or
 * decompressed on the way back. All-zero blocks (the shim's digest kernel
 * finds them in the pause) never cross the link: resume zeroes them on the
 * GPU.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { digestAllocations } from './block-digests.js';
import { GpuckptError } from '../base/errors.js';
import { writeGpuNeeds, type GpuNeed } from './gpu-room.js';
import { bytesOf, planBlocks } from '../image/chain.js';
import { DIGEST_BLOCK } from '../image/format.js';
import type { AllocationRecord } from '../image/index.js';
import type { PhaseClock } from '../base/phase-clock.js';
import type { Progress } from '../base/progress.js';
import { closeStaging, type ShimSession, type StagingMemory } from '../adapters/session.js';
import { packEach, stagingForStatus, type Placed } from './staging-plan.js';
import { DEFAULT_LEASE_MS, type StatusReply } from '../../native/index.js';

const LAYOUT_FILE = 'held-layout.json';

export interface HeldLayout {
  /** Bytes of the pool's allocations. */
  rawBytes: number;
  /** Bytes in the held memory (the groups'): rawBytes less the zero blocks. */
  heldBytes: number;
  /** Set to zero on the GPU before the groups go back (ZeroBlocks in image/chain.ts). */
  zeroFills: AllocationRecord[];
  /** The GPUs of the process's ordinals when it was suspended. */
  devices: string[];
  /** One copy request each. */
  groups: Placed[][];
  /** Held on GPUs instead (peer-hold.ts): the GPU each ordinal's data lies on; groups is empty. */
  gpus?: string[];
  /** That memory kept by the snapshot holder, not the shim: its snapshot id (gpu-snapshot.ts, or files below). */
  holder?: string;
  /** Kept by the holder in host memory (a checkpoint's suspend, kept-copy.ts): the staging's memfds, as they lay end to end. */
  files?: { size: number; fileBytes: number };
  /** The working directories of a checkpoint this data was going into (its pool image's, CRIU's): half made if the resume comes first. */
  halfMade?: string[];
}

export interface StagedPool {
  layout: HeldLayout;
  copySeconds: number;
}

/**
 * Private staging for the whole pool as status saw it, from the shim
 * (which pins its bounce ring meanwhile: 0.05 s, so a suspend asks for it
 * before its own checks); undefined when the host cannot give that much.
 */
export async function mapHeldStaging(session: ShimSession, status: StatusReply, stagingLimit?: bigint): Promise<StagingMemory | undefined> {
  const want = stagingForStatus(status, stagingLimit);
  if (BigInt(want.bytes) < want.inUse) return undefined;
  return session.mapStaging(want.bytes, 'private');
}

/**
 * Pauses the process and copies its whole pool into the staging
 * mapHeldStaging made (but for its all-zero blocks, where digests is true:
 * the digest kernel is loaded), or returns undefined (process running
 * again) when there is none or the pool outgrew it: the caller then goes
 * through a compressed image instead. On success the process stays paused.
 */
export async function stagePool(
  session: ShimSession,
  staging: StagingMemory | undefined,
  devices: string[],
  opts: { leaseMs?: number; digests?: boolean; progress?: Progress },
  clock?: PhaseClock,
): Promise<StagedPool | undefined> {
  if (!staging) return undefined;
  clock?.mark('staging');
  let paused = false;
  try {
    await session.quiesce(opts.leaseMs ?? DEFAULT_LEASE_MS);
    paused = true;
    const allocations = await session.listAllocations();
    clock?.mark('quiesce');
    const digests = opts.digests ? await digestAllocations(session, allocations, DIGEST_BLOCK) : undefined;
    const plan = digests ? planBlocks(allocations, digests, DIGEST_BLOCK) : { stored: allocations, zeros: { bytes: 0, fills: [] } };
    const placed = placeHeld(plan.stored);
    if (digests) clock?.mark('digest');
    if (placed.end > staging.size) {
      // The application allocated more since the status: take the slow path.
      await session.resume();
      paused = false;
      await session.unmapStaging();
      return undefined;
    }
    const { groups, bytes: heldBytes } = placed;
    const c0 = performance.now();
    let copied = 0;
    for (const g of groups) {
      await session.copyOut(g);
      copied += g.reduce((n, r) => n + r.length, 0);
      opts.progress?.transfer('suspend: copied to host memory', copied, heldBytes);
    }
    opts.progress?.done();
    const copySeconds = (performance.now() - c0) / 1000;
    clock?.mark('copy');
    return { layout: { rawBytes: bytesOf(allocations), heldBytes, zeroFills: plan.zeros.fills, devices, groups }, copySeconds };
  } catch (e) {
    if (paused) await session.resume().catch(() => undefined);
    throw e; // the shim drops the staging as the session closes
  }
}

/**
 * The ranges end to end in the held memory (each 4 KiB aligned), a copy
 * request's worth per group; end: the held memory they take, bytes: their
 * data. One object per range, planned inside the pause: a pool cut by its
 * zero blocks is tens of thousands of ranges, and each object more per
 * range cost the pause milliseconds of garbage collection. Unlike an
 * image's frames, a held range is never cut.
 */
export function placeHeld(ranges: AllocationRecord[]): { groups: Placed[][]; end: number; bytes: number } {
  let bytes = 0;
  const { groups, end } = packEach(
    ranges,
    (r) => Number(r.size),
    (r, stagingOffset, length): Placed => {
      bytes += length;
      return { device: r.device, addr: r.addr, length, stagingOffset };
    },
  );
  return { groups, end, bytes };
}

/**
 * Zeros, then DMA of the held data back into the (remapped) pool; the
 * caller holds the process. The data is the shim's held staging, or kept:
 * the same memory taken back from the snapshot holder (the caller's to
 * close), given to the shim. Returns the seconds spent in copies.
 */
export async function copyHeldIn(
  session: ShimSession,
  layout: HeldLayout,
  opts: { clock?: PhaseClock; progress?: Progress; kept?: StagingMemory; /** Called once the staging is pinned. */ prepared?: () => void } = {},
): Promise<number> {
  const { clock, progress, kept } = opts;
  const staging = kept ? undefined : await session.mapStaging(0, 'held');
  if (kept) await session.giveStaging(kept, true);
  clock?.mark(kept ? 'given' : 'pin');
  opts.prepared?.();
  try {
    await session.fillZeros(layout.zeroFills, layout.groups.length === 0);
    if (layout.zeroFills.length) clock?.mark('zeros');
    const c0 = performance.now();
    let copied = 0;
    for (const [i, g] of layout.groups.entries()) {
      await session.copyIn(g, i === layout.groups.length - 1);
      copied += g.reduce((n, r) => n + r.length, 0);
      progress?.transfer('resume: copied back to the GPU', copied, layout.heldBytes);
    }
    progress?.done();
    clock?.mark('copy');
    return (performance.now() - c0) / 1000;
  } finally {
    if (staging) closeStaging(staging);
  }
}

/** What a resume finds in dir for data held in memory: the layout, and what each GPU needs to take the process back. */
export function describeHeld(dir: string, layout: HeldLayout, needs: GpuNeed[]): void {
  writeHeldLayout(dir, layout);
  writeGpuNeeds(dir, needs);
}

function writeHeldLayout(dir: string, layout: HeldLayout): void {
  const groups = layout.groups.map((g) => g.map((p) => ({ ...p, addr: p.addr.toString(16) })));
  const zeroFills = layout.zeroFills.map((r) => ({ device: r.device, addr: r.addr.toString(16), size: r.size.toString(16) }));
  writeFileSync(join(dir, LAYOUT_FILE), JSON.stringify({ ...layout, groups, zeroFills }), { mode: 0o600 });
}

/** The layout when dir describes data held in memory; undefined for an image. */
export function readHeldLayout(dir: string): HeldLayout | undefined {
  let text: string;
  try {
    text = readFileSync(join(dir, LAYOUT_FILE), 'utf8');
  } catch {
    return undefined;
  }
  try {
    const raw = JSON.parse(text) as {
      rawBytes: number;
      // Absent in a layout written before zero blocks were left on the GPU.
      heldBytes?: number;
      zeroFills?: { device: number; addr: string; size: string }[];
      devices: string[];
      groups: (Omit<Placed, 'addr'> & { addr: string })[][];
      gpus?: string[];
      holder?: string;
      files?: { size: number; fileBytes: number };
      halfMade?: string[];
    };
    return {
      rawBytes: raw.rawBytes,
      heldBytes: raw.heldBytes ?? raw.rawBytes,
      zeroFills: (raw.zeroFills ?? []).map((r) => ({ device: r.device, addr: BigInt(`0x${r.addr}`), size: BigInt(`0x${r.size}`) })),
      devices: raw.devices,
      groups: raw.groups.map((g) => g.map((p) => ({ ...p, addr: BigInt(`0x${p.addr}`) }))),
      gpus: raw.gpus,
      ...(raw.holder ? { holder: raw.holder } : {}),
      ...(raw.files ? { files: raw.files } : {}),
      ...(raw.halfMade ? { halfMade: raw.halfMade } : {}),
    };
  } catch (e) {
    throw new GpuckptError('INTERNAL', `the held data's layout at ${join(dir, LAYOUT_FILE)} is unreadable: ${(e as Error).message}`);
  }
}
