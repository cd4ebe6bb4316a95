/**
 * Worker thread of a stream's sender (stream-sender.ts): reads one piece
 * of an image file and its CRC-32, so that reading and checksumming, which
 * held the sender to about 1 GB/s on one thread, run on several
 * (base/worker-pool.ts) while the sender writes the stream in order. The
 * sender hands back each chunk's buffer once written, to read into again.
 */
import { readSync } from 'node:fs';
import { parentPort } from 'node:worker_threads';
import { crc32 } from 'node:zlib';
import type { WorkerReply } from '../base/worker-pool.js';

export interface ChunkRequest {
  fd: number;
  at: number;
  length: number;
  /** Where to read (moved here), at least length bytes: a buffer of a chunk already sent. */
  into?: Uint8Array;
}

/** bytes: how many were read (fewer than asked: the file ends there); data moved, not copied. */
export interface ChunkReply extends WorkerReply {
  bytes?: number;
  crc?: number;
  data?: Uint8Array;
}

parentPort?.on('message', (r: ChunkRequest & { id: number }) => {
  try {
    // A sent chunk's buffer again: a fresh 4 MiB each time was an mmap, its
    // page faults and an munmap, which contend with the checkpoint's threads.
    const data = r.into && r.into.length >= r.length ? r.into : new Uint8Array(r.length);
    let bytes = 0;
    for (let n = 1; bytes < r.length && n > 0; bytes += n) n = readSync(r.fd, data, bytes, r.length - bytes, r.at + bytes);
    parentPort!.postMessage({ id: r.id, bytes, crc: crc32(data.subarray(0, bytes)), data } satisfies ChunkReply, [data.buffer as ArrayBuffer]);
  } catch (e) {
    parentPort!.postMessage({ id: r.id, error: { code: 'IMAGE_READ_FAILED', message: `cannot stream the image: ${(e as Error).message}` } } satisfies ChunkReply);
  }
});
