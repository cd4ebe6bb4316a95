/**
 * How pool data is cut into frames and laid out in staging memory.
 *
 * Frames are at most FRAME_BYTES, so compression spreads over workers and a
 * damaged frame costs little. Pieces are packed into staging one after the
 * other (4 KiB aligned). When staging holds every piece, nothing is reused
 * and the application's pause is pure DMA; when it cannot, staging is used
 * as a ring and a region is reused once its frame has been compressed.
 */
import { freemem } from 'node:os';
import { MAX_COPY_RANGES } from '../../native/index.js';

export const FRAME_BYTES = 16 * 1024 * 1024;
/**
 * Images leave out all-zero runs of at least this much; shorter ones are
 * stored (compressed, zeros cost next to nothing). Each run left out cuts
 * a frame: 16 GiB of the benchmark's alternating 256 KiB regions, every
 * zero run left out, took 21845 frames of 512 KiB, and a whole-process
 * restore 5.4 s instead of 2.9 s (with an O(n^2) in planChain, since
 * fixed). A suspend's held copy, which has no frames, leaves out every one.
 */
export const MIN_SKIPPED_ZERO_RUN = 2 * 1024 * 1024;
/** Ranges per copy request (the protocol's limit). */
export const MAX_RANGES_PER_COPY = MAX_COPY_RANGES;

/** A piece of the pool placed in staging: what one copy range moves. */
export interface Placed {
  device: number;
  addr: bigint;
  length: number;
  stagingOffset: number;
}
/**
 * Bytes per copy request while compression runs during the copy: a
 * batch's frames are compressed (and written) as soon as it is in
 * staging, while the next one copies. In one request, the 1.7 GB of an
 * incremental image were all copied before the first frame was compressed.
 */
export const COMPRESSING_COPY_BYTES = 128 * 1024 * 1024;
const ALIGN = 4096;

export interface Piece {
  device: number;
  addr: bigint;
  length: number;
}

export function splitIntoPieces(allocs: { device: number; addr: bigint; size: bigint }[]): Piece[] {
  const pieces: Piece[] = [];
  const frame = BigInt(FRAME_BYTES);
  for (const a of allocs) {
    // Most ranges are one piece (a pool cut by its zero blocks is tens of
    // thousands of short ones, planned inside the pause): no BigInt loop.
    if (a.size <= frame) {
      pieces.push({ device: a.device, addr: a.addr, length: Number(a.size) });
      continue;
    }
    for (let off = 0n; off < a.size; off += frame) {
      const left = a.size - off;
      pieces.push({ device: a.device, addr: a.addr + off, length: Number(left < frame ? left : frame) });
    }
  }
  return pieces;
}

export function alignUp(n: number): number {
  return Math.ceil(n / ALIGN) * ALIGN;
}

/**
 * Staging bytes to ask for: room for all the data (each piece aligned) when
 * the host has the memory, never less than two frames (copy and compress
 * overlap), never more than `limit` (default: half of free memory).
 */
export function stagingBytes(dataBytes: bigint, pieces: number, limit: bigint | undefined): number {
  const cap = limit ?? BigInt(Math.floor(freemem() / 2));
  const want = dataBytes + BigInt(pieces + 1) * BigInt(ALIGN);
  const minimum = 2n * BigInt(FRAME_BYTES);
  let bytes = want < cap ? want : cap;
  if (bytes < minimum) bytes = minimum;
  return alignUp(Number(bytes));
}

/** Staging to ask for before a pause, from the shim's status: room for the data in use, its frames and allocations. */
export function stagingForStatus(status: { devices: { bytesInUse: bigint; allocations: number }[] }, limit: bigint | undefined): { bytes: number; inUse: bigint } {
  const inUse = status.devices.reduce((s, d) => s + d.bytesInUse, 0n);
  const allocs = status.devices.reduce((s, d) => s + d.allocations, 0);
  return { bytes: stagingBytes(inUse, Number(inUse / BigInt(FRAME_BYTES)) + allocs, limit), inUse };
}

/** Staging bytes that hold every item at once, packed one after the other. */
export function packedBytes(items: { length: number }[]): number {
  return items.reduce((s, i) => alignUp(s + i.length), 0);
}

/**
 * Staging as a ring: place() hands out the next region, first waiting for
 * the work still reading any older region it overlaps.
 */
export class StagingRing {
  private cursor = 0;
  private readonly live: { start: number; end: number; done: Promise<unknown> }[] = [];

  constructor(readonly size: number) {}

  /** True when the next region of this length starts over at offset 0. */
  wraps(length: number): boolean {
    return this.cursor + length > this.size;
  }

  async place(length: number): Promise<number> {
    let start = this.cursor;
    if (start + length > this.size) start = 0;
    const end = start + length;
    for (let i = 0; i < this.live.length; ) {
      const r = this.live[i]!;
      if (r.start < end && start < r.end) {
        await r.done;
        this.live.splice(i, 1);
      } else i++;
    }
    this.cursor = alignUp(end);
    return start;
  }

  /** Region [start, start+length) is busy until done settles. */
  hold(start: number, length: number, done: Promise<unknown>): void {
    this.live.push({ start, end: start + length, done: done.catch(() => undefined) });
  }
}

/**
 * Consecutive groups of pieces that fit in staging together and in one copy
 * request each, with their staging offsets.
 */
export function batches<T extends { length: number }>(items: T[], stagingSize: number): { item: T; offset: number }[][] {
  const out: { item: T; offset: number }[][] = [];
  let cur: { item: T; offset: number }[] = [];
  let used = 0;
  for (const item of items) {
    if (cur.length === MAX_RANGES_PER_COPY || (cur.length > 0 && used + item.length > stagingSize)) {
      out.push(cur);
      cur = [];
      used = 0;
    }
    cur.push({ item, offset: used });
    used = alignUp(used + item.length);
  }
  if (cur.length) out.push(cur);
  return out;
}

/**
 * Every item in staging at once, packed one after the other, a copy
 * request's worth per group; place makes each group's entry from the item,
 * its offset and its length, so a caller builds its own records in one
 * pass. end: the staging they take.
 */
export function packEach<T, P>(items: T[], lengthOf: (item: T) => number, place: (item: T, offset: number, length: number) => P): { groups: P[][]; end: number } {
  const groups: P[][] = [];
  let group: P[] = [];
  let end = 0;
  for (const item of items) {
    if (group.length === MAX_RANGES_PER_COPY) {
      groups.push(group);
      group = [];
    }
    const length = lengthOf(item);
    group.push(place(item, end, length));
    end = alignUp(end + length);
  }
  if (group.length) groups.push(group);
  return { groups, end };
}

/** Every item in staging at once: batches at disjoint offsets, packed one after the other. */
export function packAll<T extends { length: number }>(items: T[]): { item: T; offset: number }[][] {
  return packEach(
    items,
    (item) => item.length,
    (item, offset) => ({ item, offset }),
  ).groups;
}
