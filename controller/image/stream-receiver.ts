/**
 * Worker thread of a stream's receiver (stream.ts): checks a data record's
 * CRC-32 and writes its payload at its offset. The main thread only reads
 * and frames the stream, so checking and writing, which held a receiver to
 * about 1 GB/s on one thread, run on several.
 */
import { writeSync } from 'node:fs';
import { parentPort } from 'node:worker_threads';
import { crc32 } from 'node:zlib';

/** One data record: its payload moved here (transferred, not copied). */
export interface ReceivedRecord {
  seq: number;
  fd: number;
  offset: number;
  crc: number;
  payload: Uint8Array;
}

/** ok: written; corrupt: its CRC-32 fails; error: the write failed (an errno code and message). */
export type ReceiverReply = { seq: number; ok: true } | { seq: number; corrupt: true } | { seq: number; error: { code?: string; message: string } };

parentPort?.on('message', (r: ReceivedRecord) => {
  if (crc32(r.payload) !== r.crc) return parentPort!.postMessage({ seq: r.seq, corrupt: true } satisfies ReceiverReply);
  try {
    for (let done = 0; done < r.payload.length; ) done += writeSync(r.fd, r.payload, done, r.payload.length - done, r.offset + done);
    parentPort!.postMessage({ seq: r.seq, ok: true } satisfies ReceiverReply);
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    parentPort!.postMessage({ seq: r.seq, error: { code: err.code, message: err.message } } satisfies ReceiverReply);
  }
});
