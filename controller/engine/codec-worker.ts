/**
 * Worker thread of the codec pool: compresses and decompresses frames and
 * digests blocks, straight from and into the staging memory the pool
 * mapped once for every thread (the memfds are shared with the shim too),
 * so raw pool data never crosses a thread boundary by copy; and plans
 * which zero pages a restore leaves out of a CRIU pages file.
 */
import { closeSync, fstatSync, openSync, writeSync } from 'node:fs';
import { parentPort, threadId, workerData } from 'node:worker_threads';
import { GpuckptError } from '../base/errors.js';
import { compressFrame, compressPlanes, decompressFrame, loadZstd } from '../image/frame-codec.js';
import { chooseLayout, fromPlanes, PLANES_TUNING, toPlanes, type FrameLayout } from '../image/byte-planes.js';
import { readFrameSource, readRange } from '../image/file-range.js';
import { native } from '../../native/index.js';
import type { CodecReply, CodecTask } from './codec-pool.js';
import { planZeroDrop } from './criu-zero-pages.js';

/** Frames and digested ranges are at most this long (MAX_FRAME_LENGTH); a view is made per task. */
const MAX_TASK = 64 * 1024 * 1024;
/** The staging the pool mapped for every thread (CodecPool.mapStaging). */
let staging: { base: bigint; size: number } | undefined;

loadZstd(); // while the worker starts, ahead of its first frame

function run(task: CodecTask): { reply: CodecReply; transfer: ArrayBuffer[] } {
  switch (task.op) {
    case 'cancelFlag':
      cancelled = task.cancelled;
      return { reply: { id: task.id }, transfer: [] };
    case 'map':
      staging = { base: task.base, size: task.size };
      return { reply: { id: task.id }, transfer: [] };
    case 'compress': {
      const t0 = performance.now();
      const raw = stagingView(task.offset, task.length);
      const { planes, stored }: FrameLayout = task.planes === 'off' ? { planes: 0, stored: 0 } : chooseLayout(raw, task.level, task.planes === 'auto' ? undefined : task.planes);
      const t1 = performance.now();
      // Memory of its own (compressFrame), handed over as it is.
      const out = planes ? compressPlanes(toPlanes(raw, planes, scratch(task.length)), planes, stored, task.level, PLANES_TUNING) : compressFrame(raw, task.level);
      const spent = { thread: threadId, steps: { 'choose planes': t1 - t0, compress: performance.now() - t1 } };
      return { reply: { id: task.id, data: out.buffer as ArrayBuffer, length: out.length, planes, spent }, transfer: [out.buffer as ArrayBuffer] };
    }
    case 'decompress': {
      // Read here into the worker's own buffer, then straight into staging
      // (a raw buffer per frame cost a fresh 16 MiB faulted in page by page,
      // and a copy). Byte planes go through the worker's raw buffer, put
      // back into elements on the way.
      const compressed = readFrameSource(task.src, scratchOf(compressedScratch, task.src.length));
      if (task.planes) fromPlanes(decompressFrame(compressed, task.length, task.what, scratch(task.length)), task.planes, stagingView(task.offset, task.length));
      else decompressFrame(compressed, task.length, task.what, stagingView(task.offset, task.length));
      return { reply: { id: task.id }, transfer: [] };
    }
    case 'digest': {
      // A Buffer of its own (not a pooled slab), so it can be transferred.
      const digests = native().hostBlockDigests(stagingView(task.offset, task.length), task.blockSize);
      const copy = new Uint8Array(digests.length);
      copy.set(digests);
      return { reply: { id: task.id, data: copy.buffer }, transfer: [copy.buffer] };
    }
    case 'verify': {
      const raw = decompressFrame(new Uint8Array(task.compressed), task.length, task.what, scratch(task.length));
      if (task.keep) refuseLeftOutNonZero(raw, task.keep, task.what);
      return { reply: { id: task.id }, transfer: [] };
    }
    case 'compressFile': {
      const raw = readRange(task.path, task.offset, task.length, scratch(task.length));
      const out = compressFrame(raw, task.level);
      return { reply: { id: task.id, data: out.buffer as ArrayBuffer, length: out.length, zeroPages: zeroPageRuns(raw) }, transfer: [out.buffer as ArrayBuffer] };
    }
    case 'planZeroDrop':
      return { reply: { id: task.id, drop: planZeroDrop(task.dir, task.task) ?? null }, transfer: [] };
    case 'decompressToFile': {
      // Two buffers: the frame's compressed bytes, then its raw bytes.
      const t0 = performance.now();
      const compressed = readRange(task.src, task.srcOffset, task.srcLength, scratchOf(compressedScratch, task.srcLength));
      const t1 = performance.now();
      const raw = decompressFrame(compressed, task.length, task.what, scratch(task.length));
      if (task.keep) refuseLeftOutNonZero(raw, task.keep, task.what);
      const t2 = performance.now();
      writeSparse(task.dst, task.dstOffset, raw, task.keep ?? [0, raw.length]);
      const spent = { thread: threadId, steps: { read: t1 - t0, 'decompress and check': t2 - t1, write: performance.now() - t2 } };
      return { reply: { id: task.id, spent }, transfer: [] };
    }
  }
}

const PAGE = 4096;
const ZERO_PAGE = new Uint8Array(PAGE);

/** What lies outside the [from, to) ranges keep must be what packing said: zero pages (else IMAGE_DATA_CORRUPT). */
function refuseLeftOutNonZero(raw: Uint8Array, keep: number[], what: string): void {
  let at = 0;
  for (let i = 0; i <= keep.length; i += 2) {
    const to = i < keep.length ? keep[i]! : raw.length;
    for (let p = at; p < to; p += PAGE)
      if (!isZero(raw.subarray(p, Math.min(p + PAGE, to)))) throw new GpuckptError('IMAGE_DATA_CORRUPT', `image data is corrupt: ${what}: the page at byte ${p} is not zero, as its index says`);
    at = keep[i + 1] ?? raw.length;
  }
}

/**
 * The [from, to) ranges `keep` of raw, one after the other, at offset of an
 * existing file of its full size, copied through a shared mapping (writes
 * to one file take its inode lock one at a time; page faults do not);
 * runs of zero pages are not touched and stay holes.
 */
function writeSparse(path: string, offset: number, raw: Uint8Array, keep: number[]): void {
  let length = 0;
  for (let i = 0; i < keep.length; i += 2) length += keep[i + 1]! - keep[i]!;
  if (!length) return; // a frame all left out
  const fd = openSync(path, 'r+');
  let view: ArrayBuffer;
  try {
    const size = fstatSync(fd).size;
    if (size % PAGE || offset % PAGE) return writeSparseByCalls(fd, offset, raw, keep);
    view = native().mapFiles([fd], size, size, offset, length);
  } finally {
    closeSync(fd); // the mapping holds the file
  }
  try {
    const out = new Uint8Array(view);
    eachKeptNonZeroRun(raw, keep, (from, to, at) => out.set(raw.subarray(from, to), at));
  } finally {
    native().unmapFiles(view);
  }
}

function writeSparseByCalls(fd: number, offset: number, raw: Uint8Array, keep: number[]): void {
  eachKeptNonZeroRun(raw, keep, (from, to, at) => {
    for (let done = 0; done < to - from; ) done += writeSync(fd, raw, from + done, to - from - done, offset + at + done);
  });
}

/** f(from, to, at) for each run of whole pages of raw within keep that are not all zero; at: where it lands, the kept ranges laid end to end. */
function eachKeptNonZeroRun(raw: Uint8Array, keep: number[], f: (from: number, to: number, at: number) => void): void {
  let landed = 0;
  for (let i = 0; i < keep.length; i += 2) {
    const [lo, hi] = [keep[i]!, keep[i + 1]!];
    let start = -1;
    for (let p = lo; p < hi; p += PAGE) {
      const zero = isZero(raw.subarray(p, Math.min(p + PAGE, hi)));
      if (!zero && start < 0) start = p;
      else if (zero && start >= 0) {
        f(start, p, landed + start - lo);
        start = -1;
      }
    }
    if (start >= 0) f(start, hi, landed + start - lo);
    landed += hi - lo;
  }
}

/** The runs of whole zero pages of raw, [first, count, ...] in pages. */
function zeroPageRuns(raw: Uint8Array): number[] {
  const runs: number[] = [];
  for (let p = 0; p + PAGE <= raw.length; p += PAGE) {
    if (!isZero(raw.subarray(p, p + PAGE))) continue;
    const page = p / PAGE;
    const n = runs.length;
    if (n && runs[n - 2]! + runs[n - 1]! === page) runs[n - 1]!++;
    else runs.push(page, 1);
  }
  return runs;
}

function isZero(bytes: Uint8Array): boolean {
  for (let at = 0; at < bytes.length; at += PAGE) {
    const page = bytes.subarray(at, Math.min(at + PAGE, bytes.length));
    if (Buffer.compare(page, ZERO_PAGE.subarray(0, page.length)) !== 0) return false;
  }
  return true;
}

/** Buffers of one worker, grown as needed: raw frames (verified and dropped, or read from a file), and compressed ones read from a file. */
const rawScratch = { buffer: new Uint8Array(0) };
const compressedScratch = { buffer: new Uint8Array(0) };
function scratchOf(s: { buffer: Uint8Array }, length: number): Uint8Array {
  if (s.buffer.length < length) s.buffer = new Uint8Array(length);
  return s.buffer.subarray(0, length);
}
const scratch = (length: number) => scratchOf(rawScratch, length);

function stagingView(offset: number, length: number): Uint8Array {
  if (!staging) throw new GpuckptError('INTERNAL', 'codec worker has no staging memory');
  if (offset < 0 || length < 0 || length > MAX_TASK || offset + length > staging.size)
    throw new GpuckptError('INTERNAL', `codec worker: range ${offset}+${length} outside staging of ${staging.size}`);
  return new Uint8Array(native().viewAt(staging.base + BigInt(offset), length));
}

/** Set when the pool closes: what is still queued is answered, not run. The pool's that took this worker (cancelFlag). */
let cancelled = (workerData as { cancelled: Int32Array }).cancelled;

parentPort!.on('message', (task: CodecTask) => {
  if (task.op !== 'map' && task.op !== 'cancelFlag' && Atomics.load(cancelled, 0)) {
    parentPort!.postMessage({ id: task.id, cancelled: true } satisfies CodecReply);
    return;
  }
  try {
    const { reply, transfer } = run(task);
    parentPort!.postMessage(reply, transfer);
  } catch (e) {
    const err = e instanceof GpuckptError ? { code: e.code, message: e.message } : { code: 'INTERNAL', message: String((e as Error)?.stack ?? e) };
    parentPort!.postMessage({ id: task.id, error: err } satisfies CodecReply);
  }
});
