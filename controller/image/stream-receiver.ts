/**
 * Worker thread of a stream's receiver (stream.ts): checks a data record's
 * CRC-32 and writes its payload at its offset. The main thread only reads
 * and frames the stream, so checking and writing, which held a receiver to
 * about 1 GB/s on one thread, run on several (base/worker-pool.ts).
 */
import { writeSync } from 'node:fs';
import { parentPort } from 'node:worker_threads';
import { crc32 } from 'node:zlib';
import type { WorkerReply } from '../base/worker-pool.js';

/** One data record: its payload moved here (transferred, not copied). */
export interface ReceivedRecord {
  fd: number;
  offset: number;
  crc: number;
  payload: Uint8Array;
}

/** corrupt: its CRC-32 fails; failedWrite: the write failed (its errno code and message); else written, and payload handed back to read into again. */
export interface ReceiverReply extends WorkerReply {
  corrupt?: true;
  failedWrite?: { code?: string; message: string };
  payload?: Uint8Array;
}

parentPort?.on('message', (r: ReceivedRecord & { id: number }) => {
  if (crc32(r.payload) !== r.crc) return parentPort!.postMessage({ id: r.id, corrupt: true } satisfies ReceiverReply);
  try {
    for (let done = 0; done < r.payload.length; ) done += writeSync(r.fd, r.payload, done, r.payload.length - done, r.offset + done);
    parentPort!.postMessage({ id: r.id, payload: r.payload } satisfies ReceiverReply, [r.payload.buffer as ArrayBuffer]);
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    parentPort!.postMessage({ id: r.id, failedWrite: { code: err.code, message: err.message } } satisfies ReceiverReply);
  }
});
