/**
 * Incremental images: an image made with a parent stores only the blocks
 * that changed since it, and every other byte of its allocations comes
 * from the parent, which may itself have a parent. Opening the chain checks
 * every link before anything is touched: each parent exists, is the very
 * image the child was made against (the SHA-256 of its manifest), has the
 * same pool geometry, and between them the chain holds every byte of the
 * newest image's allocations. A broken chain is IMAGE_CHAIN_BROKEN.
 */
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { GpuckptError, isGpuckptError } from '../errors.js';
import { MANIFEST_FILE, MANIFEST_HEADER_LENGTH, MAX_CHAIN_LENGTH } from './format.js';
import { hex } from './manifest-check.js';
import type { AllocationRecord, FrameRecord, Manifest } from './manifest.js';
import { ImageReader } from './reader.js';

/** The SHA-256 of an image's manifest payload, as its header records it. */
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
      if (!(await manifestSha256(parent.path)).equals(link.manifestSha256))
        throw broken(newest, `${child.path} was made against ${link.path}, which has been replaced since (its manifest differs)`);
      const a = child.manifest.pool;
      const b = parent.manifest.pool;
      if (a.base !== b.base || a.sliceSize !== b.sliceSize || a.deviceCount !== b.deviceCount)
        throw broken(newest, `${link.path} has another pool layout than ${child.path}`);
      child = parent;
    }
    return parents;
  } catch (e) {
    await Promise.all(parents.map((p) => p.close()));
    throw e;
  }
}

function broken(newest: ImageReader, why: string): GpuckptError {
  return new GpuckptError('IMAGE_CHAIN_BROKEN', `image ${newest.path} cannot be restored: ${why}`);
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

/** Digests of a manifest by block address: what a child compares against. */
export function digestsByBlock(m: Manifest): Map<string, { digest: bigint; length: number }> | undefined {
  if (!m.blocks) return undefined;
  const size = BigInt(m.blocks.size);
  const out = new Map<string, { digest: bigint; length: number }>();
  m.allocations.forEach((a, i) => {
    const d = m.blocks!.digests[i]!;
    const view = new DataView(d.buffer, d.byteOffset, d.byteLength);
    for (let k = 0; k * 8 < d.length; k++) {
      const at = a.addr + BigInt(k) * size;
      const end = at + size < a.addr + a.size ? at + size : a.addr + a.size;
      out.set(`${a.device}:${at}`, { digest: view.getBigUint64(k * 8, true), length: Number(end - at) });
    }
  });
  return out;
}

/**
 * The ranges of allocs that differ from the parent: blocks whose digest,
 * at the same address and of the same length, the parent does not have.
 * Consecutive changed blocks of one allocation make one range.
 */
export function changedRanges(
  allocs: AllocationRecord[],
  digests: Uint8Array[],
  blockSize: number,
  parent: Map<string, { digest: bigint; length: number }>,
): AllocationRecord[] {
  const out: AllocationRecord[] = [];
  const size = BigInt(blockSize);
  allocs.forEach((a, i) => {
    const d = digests[i]!;
    const view = new DataView(d.buffer, d.byteOffset, d.byteLength);
    let run: AllocationRecord | undefined;
    for (let k = 0; k * 8 < d.length; k++) {
      const at = a.addr + BigInt(k) * size;
      const end = at + size < a.addr + a.size ? at + size : a.addr + a.size;
      const had = parent.get(`${a.device}:${at}`);
      if (had && had.length === Number(end - at) && had.digest === view.getBigUint64(k * 8, true)) {
        run = undefined;
        continue;
      }
      if (run) run.size = end - run.addr;
      else out.push((run = { device: a.device, addr: at, size: end - at }));
    }
  });
  return out;
}
