/**
 * Worker thread that sends an image stream (stream.ts): it reads the
 * image's files and writes the records to the sink's fd itself, so a slow
 * reader at the other end of a pipe (ssh to a far host) blocks this thread,
 * never the controller's event loop, which runs the checkpoint. The main
 * thread posts the files to follow and how far each is written (shared
 * counters), then `finish` with the complete image's directory.
 */
import { closeSync, fstatSync, openSync, readdirSync, writeSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { parentPort, workerData } from 'node:worker_threads';
import { crc32 } from 'node:zlib';
import { GpuckptError } from '../base/errors.js';
import { WorkerPool } from '../base/worker-pool.js';
import { native } from '../../native/index.js';
import type { ChunkReply, ChunkRequest } from './stream-chunk-reader.js';
import { CHUNK, HEADER_BYTES, Kind, MAGIC, RECORD_BYTES, VERSION, type EndSummary, type StreamSummary } from './stream-format.js';

export interface SenderData {
  fd: number;
  /** A file (written in place, its writeback started as it grows) or a pipe. */
  file: boolean;
  /** Written bytes of each followed file, by slot (BigInt64Array over a SharedArrayBuffer). */
  written: SharedArrayBuffer;
  /** At most the image's bytes, for the header (0: not known). */
  bound: number;
}

export type SenderMessage = { op: 'follow'; slot: number; path: string; fd: number } | { op: 'finish'; dir: string } | { op: 'cancel' };
export type SenderReply = { done: StreamSummary } | { error: { code: string; message: string } };

/** Bytes written to a file between two starts of its writeback (as image writers do). */
const WRITEBACK_EVERY = 64 << 20;
const pause = new Int32Array(new SharedArrayBuffer(4));

class Sender {
  private readonly files: Record<string, number> = {};
  private dataRecords = 0;
  private dataBytes = 0;
  private unflushed = 0;
  /** Writebacks started: settled before the thread reports (a native completion must not outlive it). */
  private readonly writebacks: Promise<unknown>[] = [];
  bytes = 0;

  constructor(private readonly sink: SenderData) {}

  get fileCount(): number {
    return Object.keys(this.files).length;
  }

  /** crc: the payload's CRC-32 where a chunk reader computed it. */
  record(kind: Kind, path: string, offset: number, payload: Uint8Array = new Uint8Array(0), crc = crc32(payload)): void {
    // The header with the first record: a checkpoint refused before its
    // first frame leaves the stream empty, not a stream cut short.
    if (!this.bytes) {
      const head = Buffer.alloc(HEADER_BYTES);
      MAGIC.copy(head);
      head.writeUInt32LE(VERSION, MAGIC.length);
      head.writeBigUInt64LE(BigInt(Math.max(0, Math.round(this.sink.bound))), MAGIC.length + 4);
      this.write(head);
    }
    const name = Buffer.from(path);
    const h = Buffer.alloc(RECORD_BYTES + name.length);
    h.writeUInt8(kind, 0);
    h.writeUInt16LE(name.length, 1);
    h.writeUInt32LE(payload.length, 3);
    h.writeBigUInt64LE(BigInt(offset), 7);
    h.writeUInt32LE(crc, 15);
    name.copy(h, RECORD_BYTES);
    this.write(h);
    if (payload.length) this.write(payload);
    if (kind === Kind.FILE) this.files[path] = 0;
    if (kind === Kind.DATA) {
      this.dataRecords++;
      this.dataBytes += payload.length;
      this.files[path] = Math.max(this.files[path] ?? 0, offset + payload.length);
    }
  }

  /** Bytes [from, to) of fd as DATA records of path, read and checksummed ahead by the chunk readers, two pieces each. */
  async range(path: string, fd: number, from: number, to: number): Promise<void> {
    const ahead: { at: number; chunk: Promise<ChunkReply> }[] = [];
    let next = from;
    const issue = () => {
      for (; ahead.length < 2 * readers.size && next < to; next += CHUNK) ahead.push({ at: next, chunk: readers.run({ fd, at: next, length: Math.min(CHUNK, to - next) }) });
    };
    issue();
    while (ahead.length) {
      const { at, chunk } = ahead.shift()!;
      const c = await chunk;
      if (c.bytes! < Math.min(CHUNK, to - at)) {
        await Promise.allSettled(ahead.map((a) => a.chunk));
        throw new GpuckptError('IMAGE_READ_FAILED', `cannot stream ${path}: it ends at ${at + c.bytes!}, before ${to}`);
      }
      this.record(Kind.DATA, path, at, c.data!.subarray(0, c.bytes), c.crc);
      issue();
    }
  }

  /** Every writeback started has completed. */
  async settled(): Promise<void> {
    await Promise.all(this.writebacks.splice(0));
  }

  end(): void {
    const summary: EndSummary = { files: this.files, dataRecords: this.dataRecords, dataBytes: this.dataBytes };
    this.record(Kind.END, '', 0, Buffer.from(JSON.stringify(summary)));
  }

  private write(b: Uint8Array): void {
    for (let done = 0; done < b.length; ) {
      try {
        done += writeSync(this.sink.fd, b, done, b.length - done, this.sink.file ? this.bytes + done : null);
      } catch (e) {
        // Still non-blocking (setBlocking refused): wait a little for the reader.
        if ((e as NodeJS.ErrnoException).code !== 'EAGAIN') throw new GpuckptError('IMAGE_WRITE_FAILED', `cannot stream the image: ${(e as Error).message}`, { cause: e });
        Atomics.wait(pause, 0, 0, 0.05);
      }
    }
    this.bytes += b.length;
    if (!this.sink.file) return;
    this.unflushed += b.length;
    if (this.unflushed >= WRITEBACK_EVERY) {
      this.unflushed = 0;
      this.writebacks.push(native().startWriteback(this.sink.fd).catch(() => undefined)); // a hint; the final fsync makes it durable
    }
  }
}

const data = workerData as SenderData;
// Node leaves standard output's pipe non-blocking: this thread may block in
// write(2) (the main thread writes none of it meanwhile); put back at exit.
let wasBlocking = true;
try {
  wasBlocking = native().setBlocking(data.fd, true);
} catch {
  // not ours to change: EAGAIN is waited out in write()
}
if (!data.file) native().growPipe(data.fd);
const written = new BigInt64Array(data.written);
const s = new Sender(data);
// One per core beside this thread and the checkpoint's, at most 3.
const readers = new WorkerPool<ChunkRequest, ChunkReply>(new URL('./stream-chunk-reader.js', import.meta.url), Math.max(1, Math.min(3, availableParallelism() - 2)), 'stream chunk reader');
const followed: { slot: number; path: string; fd: number; at: number }[] = [];
/** Posted by the main thread, taken up by run(), which owns every write. */
const posted: { slot: number; path: string; fd: number }[] = [];
let finish: string | undefined;
let cancelled = false;

/** Frames as they reach the disk, while the checkpoint runs; then the rest of the complete image. */
async function run(): Promise<StreamSummary> {
  const takeUp = () => {
    for (const f of posted.splice(0)) {
      s.record(Kind.FILE, f.path, 0);
      followed.push({ ...f, at: 0 });
    }
  };
  while (finish === undefined) {
    if (cancelled) throw new GpuckptError('IMAGE_WRITE_FAILED', 'the checkpoint failed: the stream stops short');
    takeUp();
    let moved = false;
    for (const f of followed) {
      const ready = Number(Atomics.load(written, f.slot));
      if (ready > f.at) {
        await s.range(f.path, f.fd, f.at, ready);
        f.at = ready;
        moved = true;
      }
    }
    if (!moved) await new Promise((r) => setTimeout(r, 2)); // lets the main thread's messages in
  }
  takeUp();
  for (const f of followed) {
    const ready = Number(Atomics.load(written, f.slot));
    if (ready > f.at) await s.range(f.path, f.fd, f.at, ready);
    f.at = Math.max(f.at, ready);
  }
  const from = new Map(followed.map((f) => [f.path, f.at]));
  const root = finish;
  const walk = async (rel: string): Promise<void> => {
    for (const e of readdirSync(join(root, rel), { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const path = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) {
        s.record(Kind.DIR, path, 0);
        await walk(path);
      } else if (e.isFile()) {
        const at = from.get(path);
        if (at === undefined) s.record(Kind.FILE, path, 0);
        const fd = openSync(join(root, path), 'r');
        try {
          await s.range(path, fd, at ?? 0, fstatSync(fd).size);
        } finally {
          closeSync(fd);
        }
      } else throw new GpuckptError('IMAGE_CORRUPT', `cannot stream ${join(root, path)}: not a regular file or directory`);
    }
  };
  await walk('');
  s.end();
  return { bytes: s.bytes, files: s.fileCount };
}

parentPort!.on('message', (m: SenderMessage) => {
  if (m.op === 'follow') posted.push({ slot: m.slot, path: m.path, fd: m.fd });
  else if (m.op === 'cancel') cancelled = true;
  else finish = m.dir;
});
// Reported once every writeback has completed: the main thread ends this
// thread on the report, and a native completion left behind would abort
// the process.
run().finally(async () => {
  if (!wasBlocking) native().setBlocking(data.fd, false);
  await readers.close();
  await s.settled();
}).then(
  (done) => parentPort!.postMessage({ done } satisfies SenderReply),
  (e: unknown) => {
    const error = e instanceof GpuckptError ? { code: e.code, message: e.message } : { code: 'INTERNAL', message: String((e as Error)?.stack ?? e) };
    parentPort!.postMessage({ error } satisfies SenderReply);
  },
);
