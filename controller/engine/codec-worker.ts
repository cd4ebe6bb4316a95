/**
 * Worker thread of the codec pool: compresses and decompresses frames, and
 * digests blocks, straight from and into the staging memory it maps itself (the memfds
 * are shared by every thread of the controller and by the shim), so raw pool
 * data never crosses a thread boundary by copy.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { GpuckptError } from '../base/errors.js';
import { compressFrame, decompressFrame } from '../image/frame-codec.js';
import { native } from '../../native/index.js';
import type { CodecReply, CodecTask } from './codec-pool.js';

/**
 * Staging is mapped in windows (V8 caps an ArrayBuffer at 4 GiB): window k
 * covers [k*WINDOW, k*WINDOW + WINDOW + MAX_TASK), so any task no longer
 * than MAX_TASK that starts in window k lies wholly inside it.
 */
const WINDOW = 1024 * 1024 * 1024;
const MAX_TASK = 64 * 1024 * 1024;
let staging: { fds: number[]; fileBytes: number; size: number; windows: Map<number, Uint8Array> } | undefined;

function run(task: CodecTask): { reply: CodecReply; transfer: ArrayBuffer[] } {
  switch (task.op) {
    case 'map':
      staging = { fds: task.fds, fileBytes: task.fileBytes, size: task.size, windows: new Map() };
      return { reply: { id: task.id }, transfer: [] };
    case 'compress': {
      const out = compressFrame(stagingView(task.offset, task.length), task.level);
      // Own, transferable memory: zstd-napi may return a view into a shared pool.
      const copy = new Uint8Array(out.length);
      copy.set(out);
      return { reply: { id: task.id, data: copy.buffer }, transfer: [copy.buffer] };
    }
    case 'decompress':
      // Straight into staging: a buffer of its own per frame cost a fresh
      // 16 MiB (faulted in page by page) and a copy of it.
      decompressFrame(new Uint8Array(task.compressed), task.length, task.what, stagingView(task.offset, task.length));
      return { reply: { id: task.id }, transfer: [] };
    case 'digest': {
      // A Buffer of its own (not a pooled slab), so it can be transferred.
      const digests = native().hostBlockDigests(stagingView(task.offset, task.length), task.blockSize);
      const copy = new Uint8Array(digests.length);
      copy.set(digests);
      return { reply: { id: task.id, data: copy.buffer }, transfer: [copy.buffer] };
    }
    case 'verify':
      decompressFrame(new Uint8Array(task.compressed), task.length, task.what, scratch(task.length));
      return { reply: { id: task.id }, transfer: [] };
  }
}

/** Where verified frames are decompressed and dropped: one buffer per worker, grown as needed. */
let scratchBuffer = new Uint8Array(0);
function scratch(length: number): Uint8Array {
  if (scratchBuffer.length < length) scratchBuffer = new Uint8Array(length);
  return scratchBuffer.subarray(0, length);
}

function stagingView(offset: number, length: number): Uint8Array {
  if (!staging) throw new GpuckptError('INTERNAL', 'codec worker has no staging memory');
  if (offset < 0 || length < 0 || length > MAX_TASK || offset + length > staging.size)
    throw new GpuckptError('INTERNAL', `codec worker: range ${offset}+${length} outside staging of ${staging.size}`);
  const k = Math.floor(offset / WINDOW);
  let win = staging.windows.get(k);
  if (!win) {
    const start = k * WINDOW;
    win = new Uint8Array(native().mapFiles(staging.fds, staging.fileBytes, staging.size, start, Math.min(WINDOW + MAX_TASK, staging.size - start)));
    staging.windows.set(k, win);
  }
  const at = offset - k * WINDOW;
  return win.subarray(at, at + length);
}

/** Set when the pool closes: what is still queued is answered, not run. */
const cancelled = (workerData as { cancelled: Int32Array }).cancelled;

parentPort!.on('message', (task: CodecTask) => {
  if (task.op !== 'map' && Atomics.load(cancelled, 0)) {
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
