/**
 * Worker thread of the codec pool: compresses and decompresses frames
 * straight from and into the staging memory it maps itself (the memfd is
 * shared by every thread of the controller and by the shim), so raw pool
 * data never crosses a thread boundary by copy.
 */
import { parentPort } from 'node:worker_threads';
import { GpuckptError } from './errors.js';
import { compressFrame, decompressFrame } from './image/frame-codec.js';
import { native } from '../native/index.js';
import type { CodecReply, CodecTask } from './codec-pool.js';

let staging: Uint8Array | undefined;

function run(task: CodecTask): { reply: CodecReply; transfer: ArrayBuffer[] } {
  switch (task.op) {
    case 'map':
      staging = new Uint8Array(native().mapFd(task.fd, task.size));
      return { reply: { id: task.id }, transfer: [] };
    case 'compress': {
      const out = compressFrame(stagingView(task.offset, task.length), task.level);
      // Own, transferable memory: zstd-napi may return a view into a shared pool.
      const copy = new Uint8Array(out.length);
      copy.set(out);
      return { reply: { id: task.id, data: copy.buffer }, transfer: [copy.buffer] };
    }
    case 'decompress': {
      const raw = decompressFrame(new Uint8Array(task.compressed), task.length, task.what);
      stagingView(task.offset, task.length).set(raw);
      return { reply: { id: task.id }, transfer: [] };
    }
    case 'verify':
      decompressFrame(new Uint8Array(task.compressed), task.length, task.what);
      return { reply: { id: task.id }, transfer: [] };
  }
}

function stagingView(offset: number, length: number): Uint8Array {
  if (!staging) throw new GpuckptError('INTERNAL', 'codec worker has no staging memory');
  if (offset < 0 || length < 0 || offset + length > staging.length)
    throw new GpuckptError('INTERNAL', `codec worker: range ${offset}+${length} outside staging of ${staging.length}`);
  return staging.subarray(offset, offset + length);
}

parentPort!.on('message', (task: CodecTask) => {
  try {
    const { reply, transfer } = run(task);
    parentPort!.postMessage(reply, transfer);
  } catch (e) {
    const err = e instanceof GpuckptError ? { code: e.code, message: e.message } : { code: 'INTERNAL', message: String((e as Error)?.stack ?? e) };
    parentPort!.postMessage({ id: task.id, error: err } satisfies CodecReply);
  }
});
