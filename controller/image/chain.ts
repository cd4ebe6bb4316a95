/**
 * Incremental images: an image made with a parent stores only the blocks
 * that changed since it, and every other byte of its allocations comes
 * from the parent, which may itself have a parent. Opening the chain checks
 * every link before anything is touched: each parent exists, is the very
 * image the child was made against (the SHA-256 of its manifest), has the
 * same pool geometry, and between them the chain holds every byte of the
 * newest image's allocations. A broken chain is IMAGE_CHAIN_BROKEN.
 */
import { realpathSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { GpuckptError, isGpuckptError } from '../base/errors.js';
import { MANIFEST_FILE, MANIFEST_HEADER_LENGTH, MAX_CHAIN_LENGTH } from './format.js';
import { AllocationBlocks } from './blocks.js';
import { firstEndingAfter, firstEndingAfterBy } from './unused-ranges.js';
import { hex } from './manifest-check.js';
import type { AllocationRecord, FrameRecord, Manifest } from './manifest-types.js';
import { ImageReader } from './reader.js';

/**
 * The SHA-256 of an image's manifest payload, as its header on disk records
 * it now (an open ImageReader has the one it read: manifestSha256).
 */
export async function manifestSha256(imagePath: string): Promise<Buffer> {
  const fh = await open(join(imagePath, MANIFEST_FILE), 'r');
  try {
    const header = Buffer.alloc(MANIFEST_HEADER_LENGTH);
    const { bytesRead } = await fh.read(header, 0, header.length, 0);
    if (bytesRead !== header.length) throw new GpuckptError('IMAGE_TRUNCATED', `image manifest ${imagePath} is truncated`);
    return header.subarray(16, 48);
  } finally {
    await fh.close();
  }
}

/**
 * The parents of newest, nearest first, opened and checked link by link
 * (the caller closes them). Empty for an image without a parent.
 */
export async function openParents(newest: ImageReader): Promise<ImageReader[]> {
  const parents: ImageReader[] = [];
  try {
    for (let child = newest; child.manifest.parent; ) {
      const link = child.manifest.parent;
      if (parents.length + 1 >= MAX_CHAIN_LENGTH) throw broken(newest, `its chain of parents is longer than ${MAX_CHAIN_LENGTH} images`);
      let parent: ImageReader;
      try {
        parent = await ImageReader.open(link.path);
      } catch (e) {
        const why = isGpuckptError(e, 'IMAGE_MISSING') ? 'which is missing' : `which cannot be read: ${(e as Error).message}`;
        throw broken(newest, `${child.path} was made against ${link.path}, ${why}`);
      }
      parents.push(parent);
      if (!parent.manifestSha256.equals(link.manifestSha256))
        throw broken(newest, `${child.path} was made against ${link.path}, which has been replaced since (its manifest differs)`);
      if (!samePool(child.manifest.pool, parent.manifest.pool)) throw broken(newest, `${link.path} has another pool layout than ${child.path}`);
      child = parent;
    }
    return parents;
  } catch (e) {
    await Promise.all(parents.map((p) => p.close()));
    throw e;
  }
}

export interface OpenedChain extends ChainPlan {
  parents: ImageReader[];
}

/**
 * newest's parents, opened and checked, and which frames restore it (see
 * planChain); the caller closes the parents. Nothing is left open on a
 * refusal.
 */
export async function openChain(newest: ImageReader): Promise<OpenedChain> {
  const parents = await openParents(newest);
  try {
    return { parents, ...planChain([newest, ...parents]) };
  } catch (e) {
    await Promise.all(parents.map((p) => p.close()));
    throw e;
  }
}

/**
 * Refuses an output path that is one of the images of a chain (through
 * symbolic links too): writing there, with --force, would delete an image
 * the new one needs.
 */
export function refuseReplacingChain(out: string, chain: ImageReader[]): void {
  const target = realOrResolved(out);
  for (const r of chain)
    if (realOrResolved(r.path) === target) throw new GpuckptError('BAD_ARGUMENT', `${out} is ${r.path}, which the new image needs as its parent or one of its parents: choose another output`);
}

/** The real path of p, or of its parent directory joined with its name when p does not exist yet. */
function realOrResolved(p: string): string {
  const abs = resolve(p);
  try {
    return realpathSync(abs);
  } catch {
    try {
      return join(realpathSync(dirname(abs)), basename(abs));
    } catch {
      return abs;
    }
  }
}

function broken(newest: ImageReader, why: string): GpuckptError {
  return new GpuckptError('IMAGE_CHAIN_BROKEN', `image ${newest.path} cannot be restored: ${why}`);
}

/** Same base, slice size and device count: addresses mean the same in both. */
export function samePool(a: { base: bigint; sliceSize: bigint; deviceCount: number }, b: { base: bigint; sliceSize: bigint; deviceCount: number }): boolean {
  return a.base === b.base && a.sliceSize === b.sliceSize && a.deviceCount === b.deviceCount;
}

/** One frame to decompress, and the parts of it that go into the pool. */
export interface ChainSource {
  /** Index into the chain (0: the newest image). */
  image: number;
  frameIndex: number;
  frame: FrameRecord;
  /** Byte ranges of the frame to copy: device address and length. */
  parts: { addr: bigint; length: number }[];
}

/** How an image is restored: the frames that hold its data, and where zeros go first. */
export interface ChainPlan {
  sources: ChainSource[];
  /** Set to zero before the frames' data goes in: the newest image's all-zero blocks (see ZeroBlocks). */
  zeroFills: AllocationRecord[];
}

/**
 * Which bytes of which frames make up the newest image's allocations: the
 * newest image's frames first, then its all-zero blocks that no frame of
 * it holds are zeros (whatever a parent held there), then each parent's
 * frames for what is still missing, never a byte twice. Throws
 * IMAGE_CHAIN_BROKEN when the chain leaves a byte of an allocation without
 * data.
 */
export function planChain(chain: ImageReader[]): ChainPlan {
  const newest = chain[0]!.manifest;
  const zeroFills: AllocationRecord[] = [];
  // Per allocation, the address ranges still without data, sorted.
  const missing = newest.allocations.map((a) => ({ a, gaps: [{ start: a.addr, end: a.addr + a.size }] }));
  const sorted = [...missing].sort((x, y) => (x.a.addr < y.a.addr ? -1 : 1));
  // What the framework held unused needs no data from anywhere.
  for (const u of newest.unused ?? []) for (const owner of overlapping(sorted, { device: u.device, addr: u.addr, length: u.size })) owner.gaps = take(owner.gaps, u.addr, u.addr + u.size, []);
  const sources: ChainSource[] = [];
  chain.forEach((reader, image) => {
    if (image === 1) carveZeros();
    reader.manifest.data.frames.forEach((frame, frameIndex) => {
      const parts: ChainSource['parts'] = [];
      // A parent's frame may span allocations the newest image has split,
      // or lie where it has none (then nothing of it is used).
      for (const owner of overlapping(sorted, frame)) owner.gaps = take(owner.gaps, frame.addr, frame.addr + BigInt(frame.length), parts);
      if (parts.length) sources.push({ image, frameIndex, frame, parts });
    });
  });
  if (chain.length === 1) carveZeros();
  for (const { a, gaps } of missing) {
    const g = gaps[0];
    if (g)
      throw new GpuckptError(
        'IMAGE_CHAIN_BROKEN',
        `image ${chain[0]!.path} cannot be restored: no image of its chain holds ${hex(g.start)}+${hex(g.end - g.start)} of allocation ${hex(a.addr)} (device ${a.device})`,
      );
  }
  return { sources, zeroFills };

  /** The newest image's zero blocks still missing are zeros: filled, never taken from a parent. */
  function carveZeros(): void {
    if (!newest.blocks) return;
    missing.forEach((m, i) => {
      const zeroed: ChainSource['parts'] = [];
      for (const z of zeroRanges([m.a], [newest.blocks!.digests[i]!], newest.blocks!.size)) m.gaps = take(m.gaps, z.addr, z.addr + z.size, zeroed);
      zeroFills.push(...cover(zeroed.map((p) => ({ device: m.a.device, addr: p.addr, size: BigInt(p.length) }))));
    });
  }
}

/**
 * Takes [start, end) out of gaps (sorted, disjoint), adding what it took to
 * parts; returns the gaps left. Finds the first gap it touches by bisection:
 * an allocation cut by zero blocks has thousands of gaps.
 */
function take(gaps: { start: bigint; end: bigint }[], start: bigint, end: bigint, parts: ChainSource['parts']): { start: bigint; end: bigint }[] {
  const lo = firstEndingAfterBy(gaps, start, (g) => g.end);
  const kept: { start: bigint; end: bigint }[] = [];
  let k = lo;
  for (; k < gaps.length && gaps[k]!.start < end; k++) {
    const g = gaps[k]!;
    const s = g.start > start ? g.start : start;
    const e = g.end < end ? g.end : end;
    parts.push({ addr: s, length: Number(e - s) });
    if (g.start < s) kept.push({ start: g.start, end: s });
    if (e < g.end) kept.push({ start: e, end: g.end });
  }
  if (k === lo) return gaps;
  gaps.splice(lo, k - lo, ...kept);
  return gaps;
}

/** The newest image's allocations on the frame's device that share bytes with it. */
function overlapping<T extends { a: AllocationRecord }>(sorted: T[], frame: Pick<FrameRecord, 'device' | 'addr'> & { length: number | bigint }): T[] {
  const end = frame.addr + BigInt(frame.length);
  const out: T[] = [];
  for (let k = firstEndingAfterBy(sorted, frame.addr, ({ a }) => a.addr + a.size); k < sorted.length && sorted[k]!.a.addr < end; k++) if (sorted[k]!.a.device === frame.device) out.push(sorted[k]!);
  return out;
}

/**
 * A parent image's block digests, looked up by block address: a child's
 * block is unchanged when the parent has a block at the same address, of
 * the same length and digest. Kept by allocation, not by block: a map of
 * 65536 blocks keyed by address (16 GiB) took 70 ms to build and, inside
 * the pause, 60 ms to look up.
 */
export class ParentBlocks {
  /** Per device, the parent's allocations by address. */
  private readonly byDevice = new Map<number, { addr: bigint; end: bigint; blocks: AllocationBlocks }[]>();

  /** unused: the parent's ranges in no frame of it (Manifest.unused), whose blocks a child must store itself. */
  constructor(allocs: AllocationRecord[], digests: Uint8Array[], readonly blockSize: number, unused: AllocationRecord[] = []) {
    allocs.forEach((a, i) => {
      const list = this.byDevice.get(a.device) ?? [];
      list.push({ addr: a.addr, end: a.addr + a.size, blocks: new AllocationBlocks(a, blockSize, digests[i]!, absentBlocks(a, blockSize, unused)) });
      this.byDevice.set(a.device, list);
    });
    for (const list of this.byDevice.values()) list.sort((x, y) => (x.addr < y.addr ? -1 : x.addr > y.addr ? 1 : 0));
  }

  /** The parent's allocation holding addr on device. */
  private holding(device: number, addr: bigint) {
    const list = this.byDevice.get(device) ?? [];
    const p = list[firstEndingAfterBy(list, addr, (x) => x.end)];
    return p && p.addr <= addr ? p : undefined;
  }

  /** Whether block k of allocation a (its digests b) is unchanged since the parent. */
  unchangedIn(a: AllocationRecord, b: AllocationBlocks): (k: number) => boolean {
    // The parent's block j is the child's block k: same length, same digest.
    const sameBlock = (p: AllocationBlocks, j: number, k: number) => j < p.count && !p.absent(j) && p.bytes(j, j + 1) === b.bytes(k, k + 1) && p.sameDigest(j, b, k);
    const same = this.holding(a.device, a.addr);
    // Usually the parent has the same allocation: block k against block k.
    if (same && same.addr === a.addr) return (k) => sameBlock(same.blocks, k, k);
    const size = BigInt(this.blockSize);
    return (k) => {
      const addr = b.addr(k);
      const p = this.holding(a.device, addr);
      return !!p && (addr - p.addr) % size === 0n && sameBlock(p.blocks, Number((addr - p.addr) / size), k);
    };
  }
}

/** A manifest's block digests as a parent (undefined when it has none). */
export function parentBlocks(m: Manifest): ParentBlocks | undefined {
  return m.blocks ? new ParentBlocks(m.allocations, m.blocks.digests, m.blocks.size, m.unused) : undefined;
}

/** Which blocks of a share bytes with the unused ranges (sorted); undefined for none. */
function absentBlocks(a: AllocationRecord, blockSize: number, unused: AllocationRecord[]): Uint8Array | undefined {
  let absent: Uint8Array | undefined;
  const end = a.addr + a.size;
  for (let i = firstEndingAfter(unused, a.addr); i < unused.length && unused[i]!.addr < end; i++) {
    const u = unused[i]!;
    absent ??= new Uint8Array(Math.ceil(Number(a.size) / blockSize));
    const from = Math.floor(Number((u.addr > a.addr ? u.addr : a.addr) - a.addr) / blockSize);
    const to = Math.ceil(Number((u.addr + u.size < end ? u.addr + u.size : end) - a.addr) / blockSize);
    absent.fill(1, from, to);
  }
  return absent;
}

/** The all-zero blocks of allocs (digest 0), consecutive ones of an allocation as one range. */
export function zeroRanges(allocs: AllocationRecord[], digests: Uint8Array[], blockSize: number): AllocationRecord[] {
  return allocs.flatMap((a, i) => {
    const b = new AllocationBlocks(a, blockSize, digests[i]!);
    return b.runs((k) => b.isZero(k));
  });
}

/**
 * The all-zero blocks left out of a copy, and what a restore sets to zero
 * for them: one range per allocation, from its first such block to the
 * end of its last, zeroed in one call before the data is copied over the
 * rest. A pool whose zeros alternate with data (the benchmark's: 256 KiB
 * regions) would otherwise take a call per block (16 GiB: 21845 launches,
 * ~45 ms), where zeroing a few GiB more at HBM speed takes milliseconds.
 */
export interface ZeroBlocks {
  bytes: number;
  fills: AllocationRecord[];
}

/** What a copy of allocs moves (stored) and what it leaves on the GPU as zeros. */
export interface BlockPlan {
  stored: AllocationRecord[];
  zeros: ZeroBlocks;
}

/**
 * From the digests (blocks of blockSize), in one pass per allocation: the
 * ranges to copy and store, every block but those of all-zero runs of at
 * least minZeroRun bytes (the zeros) and, against a parent, only blocks
 * whose digest, at the same address and of the same length, the parent
 * does not have. Consecutive such blocks of one allocation make one range.
 */
export function planBlocks(allocs: AllocationRecord[], digests: Uint8Array[], blockSize: number, parent?: ParentBlocks, minZeroRun = 0): BlockPlan {
  const plan: BlockPlan = { stored: [], zeros: { bytes: 0, fills: [] } };
  allocs.forEach((a, i) => {
    const b = new AllocationBlocks(a, blockSize, digests[i]!);
    const left = new Uint8Array(b.count); // 1: in a zero run left out
    // The runs left out, as block indices: from the first's start to the last's end (cover()).
    let first = -1;
    let end = -1;
    for (let k = 0; k < b.count; ) {
      let e = k;
      while (e < b.count && b.isZero(e)) e++;
      if (e > k && b.bytes(k, e) >= minZeroRun) {
        left.fill(1, k, e);
        plan.zeros.bytes += b.bytes(k, e);
        if (first < 0) first = k;
        end = e;
      }
      k = e > k ? e : k + 1;
    }
    if (first >= 0) plan.zeros.fills.push(b.range(first, end));
    const unchanged = parent?.unchangedIn(a, b);
    plan.stored.push(...b.runs((k) => !left[k] && !unchanged?.(k)));
  });
  return plan;
}

/** The one range from the first of ranges (sorted, of one allocation) to the end of the last; none for none. */
function cover(ranges: AllocationRecord[]): AllocationRecord[] {
  const first = ranges[0];
  const last = ranges[ranges.length - 1];
  return first && last ? [{ device: first.device, addr: first.addr, size: last.addr + last.size - first.addr }] : [];
}

/** Bytes of ranges. */
export function bytesOf(ranges: { size: bigint }[]): number {
  return Number(ranges.reduce((n, r) => n + r.size, 0n));
}
