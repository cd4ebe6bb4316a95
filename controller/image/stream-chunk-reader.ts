/**
 * Worker thread of a stream's sender (stream-sender.ts): reads one piece
 * of an image file and its CRC-32, so that reading and checksumming, which
 * held the sender to about 1 GB/s on one thread, run on several while the
 * sender writes the stream in order.
 */
import { readSync } from 'node:fs';
import { parentPort } from 'node:worker_threads';
import { crc32 } from 'node:zlib';

export interface ChunkRequest {
  id: number;
  fd: number;
  at: number;
  length: number;
}

/** bytes: how many were read (fewer than asked: the file ends there); data moved, not copied. */
export type ChunkReply = { id: number; bytes: number; crc: number; data: Uint8Array } | { id: number; error: string };

parentPort?.on('message', (r: ChunkRequest) => {
  try {
    const data = new Uint8Array(r.length);
    let bytes = 0;
    for (let n = 1; bytes < r.length && n > 0; bytes += n) n = readSync(r.fd, data, bytes, r.length - bytes, r.at + bytes);
    parentPort!.postMessage({ id: r.id, bytes, crc: crc32(data.subarray(0, bytes)), data } satisfies ChunkReply, [data.buffer]);
  } catch (e) {
    parentPort!.postMessage({ id: r.id, error: (e as Error).message } satisfies ChunkReply);
  }
});
