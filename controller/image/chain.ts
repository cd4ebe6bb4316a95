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
import { GpuckptError, isGpuckptError } from '../errors.js';
import { MANIFEST_FILE, MANIFEST_HEADER_LENGTH, MAX_CHAIN_LENGTH } from './format.js';
import { hex } from './manifest-check.js';
import type { AllocationRecord, FrameRecord, Manifest } from './manifest.js';
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

export interface OpenedChain {
  parents: ImageReader[];
  sources: ChainSource[];
}

/**
 * newest's parents, opened and checked, and which frames restore it (see
 * planChain); the caller closes the parents. Nothing is left open on a
 * refusal.
 */
export async function openChain(newest: ImageReader): Promise<OpenedChain> {
  const parents = await openParents(newest);
  try {
    return { parents, sources: planChain([newest, ...parents]) };
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

/**
 * Which bytes of which frames make up the newest image's allocations: the
 * newest image's frames first, then each parent's for what is still
 * missing, never a byte twice. Throws IMAGE_CHAIN_BROKEN when the chain
 * leaves a byte of an allocation without data.
 */
export function planChain(chain: ImageReader[]): ChainSource[] {
  const newest = chain[0]!.manifest;
  // Per allocation, the address ranges still without data, sorted.
  const missing = newest.allocations.map((a) => ({ a, gaps: [{ start: a.addr, end: a.addr + a.size }] }));
  const sorted = [...missing].sort((x, y) => (x.a.addr < y.a.addr ? -1 : 1));
  const sources: ChainSource[] = [];
  chain.forEach((reader, image) => {
    reader.manifest.data.frames.forEach((frame, frameIndex) => {
      const fStart = frame.addr;
      const fEnd = frame.addr + BigInt(frame.length);
      const parts: ChainSource['parts'] = [];
      // A parent's frame may span allocations the newest image has split,
      // or lie where it has none (then nothing of it is used).
      for (const owner of overlapping(sorted, frame)) {
        const gaps: { start: bigint; end: bigint }[] = [];
        for (const g of owner.gaps) {
          const s = g.start > fStart ? g.start : fStart;
          const e = g.end < fEnd ? g.end : fEnd;
          if (s >= e) {
            gaps.push(g);
            continue;
          }
          parts.push({ addr: s, length: Number(e - s) });
          if (g.start < s) gaps.push({ start: g.start, end: s });
          if (e < g.end) gaps.push({ start: e, end: g.end });
        }
        owner.gaps = gaps;
      }
      if (parts.length) sources.push({ image, frameIndex, frame, parts });
    });
  });
  for (const { a, gaps } of missing) {
    const g = gaps[0];
    if (g)
      throw new GpuckptError(
        'IMAGE_CHAIN_BROKEN',
        `image ${chain[0]!.path} cannot be restored: no image of its chain holds ${hex(g.start)}+${hex(g.end - g.start)} of allocation ${hex(a.addr)} (device ${a.device})`,
      );
  }
  return sources;
}

/** The newest image's allocations on the frame's device that share bytes with it. */
function overlapping<T extends { a: AllocationRecord }>(sorted: T[], frame: FrameRecord): T[] {
  const end = frame.addr + BigInt(frame.length);
  // The first allocation ending after the frame's start.
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    const { a } = sorted[mid]!;
    if (a.addr + a.size <= frame.addr) lo = mid + 1;
    else hi = mid;
  }
  const out: T[] = [];
  for (let k = lo; k < sorted.length && sorted[k]!.a.addr < end; k++) if (sorted[k]!.a.device === frame.device) out.push(sorted[k]!);
  return out;
}

/** A block's digest and length, as a parent recorded it. */
export interface BlockDigest {
  digest: bigint;
  length: number;
}

/** Digests by `${device}:${block address}`: what a child is compared against. */
export type DigestsByBlock = Map<string, BlockDigest>;

/** The blocks of allocation a in blocks of size bytes, from its start (the last one shorter), with their digests in d. */
function* blocksOf(a: AllocationRecord, size: number, d: Uint8Array): Generator<{ key: string; addr: bigint; length: number; digest: bigint }> {
  const view = new DataView(d.buffer, d.byteOffset, d.byteLength);
  const step = BigInt(size);
  const end = a.addr + a.size;
  for (let k = 0; k * 8 < d.length; k++) {
    const addr = a.addr + BigInt(k) * step;
    const length = Number((addr + step < end ? addr + step : end) - addr);
    yield { key: `${a.device}:${addr}`, addr, length, digest: view.getBigUint64(k * 8, true) };
  }
}

/** A manifest's digests by block (undefined when it has none). */
export function digestsByBlock(m: Manifest): DigestsByBlock | undefined {
  if (!m.blocks) return undefined;
  const out: DigestsByBlock = new Map();
  m.allocations.forEach((a, i) => {
    for (const b of blocksOf(a, m.blocks!.size, m.blocks!.digests[i]!)) out.set(b.key, { digest: b.digest, length: b.length });
  });
  return out;
}

/**
 * The ranges of allocs that differ from the parent: blocks whose digest,
 * at the same address and of the same length, the parent does not have.
 * Consecutive changed blocks of one allocation make one range.
 */
export function changedRanges(allocs: AllocationRecord[], digests: Uint8Array[], blockSize: number, parent: DigestsByBlock): AllocationRecord[] {
  const out: AllocationRecord[] = [];
  allocs.forEach((a, i) => {
    let run: AllocationRecord | undefined;
    for (const b of blocksOf(a, blockSize, digests[i]!)) {
      const had = parent.get(b.key);
      if (had && had.length === b.length && had.digest === b.digest) {
        run = undefined;
        continue;
      }
      if (run) run.size = b.addr + BigInt(b.length) - run.addr;
      else out.push((run = { device: a.device, addr: b.addr, size: BigInt(b.length) }));
    }
  });
  return out;
}
