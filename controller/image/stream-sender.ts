/**
 * Child process that sends an image stream (stream.ts): it reads the
 * image's files and writes the records to its standard output, the sink
 * the checkpoint gave it (a pipe or the file being exported). A process of
 * its own, not a thread of the checkpoint's: the checkpoint's end (its
 * codec threads ending, 2 GiB of staging unmapped, each mapping of it torn
 * down) stalled a sender in the same address space for 0.2 s, and a slow
 * reader at the other end of a pipe (ssh to a far host) blocks only it.
 * The parent sends the files to follow and how far each is written, then
 * `finish` with the complete image's directory.
 */
import { closeSync, fstatSync, openSync, readdirSync, writeSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { GpuckptError } from '../base/errors.js';
import { log, logEnabled } from '../base/log.js';
import { WorkerPool } from '../base/worker-pool.js';
import { native } from '../../native/index.js';
import type { ChunkReply, ChunkRequest } from './stream-chunk-reader.js';
import { CHUNK, HEADER_BYTES, Kind, MAGIC, RECORD_BYTES, TRACE_BYTES, VERSION, type EndSummary, type StreamSummary } from './stream-format.js';

/** The sender's one argument, as JSON. */
export interface SenderArgs {
  /** A file (written in place, its writeback started as it grows) or a pipe. */
  file: boolean;
  /** At most the image's bytes, for the header (0: not known). */
  bound: number;
}

/** source: where the followed file can be opened (the parent's descriptor of it, under /proc). */
export type SenderMessage =
  | { op: 'follow'; slot: number; path: string; source: string }
  | { op: 'written'; slot: number; bytes: number }
  | { op: 'finish'; dir: string };
export type SenderReply = { done: StreamSummary } | { error: { code: string; message: string } };

/** The stream: this process's standard output. */
const SINK = 1;
/** Bytes written to a file between two starts of its writeback (as image writers do). */
const WRITEBACK_EVERY = 64 << 20;
const pause = new Int32Array(new SharedArrayBuffer(4));

class Sender {
  private readonly files: Record<string, number> = {};
  private dataRecords = 0;
  private dataBytes = 0;
  private unflushed = 0;
  private traced = 0;
  /** Buffers of chunks written, for the chunk readers to read into again. */
  private readonly spare: Uint8Array[] = [];
  /** Writebacks started: settled before this process reports (a native completion must not outlive its thread). */
  private readonly writebacks: Promise<unknown>[] = [];
  bytes = 0;

  constructor(private readonly sink: SenderArgs) {}

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
    if (this.bytes >= this.traced + TRACE_BYTES && logEnabled('debug')) {
      this.traced = this.bytes;
      log('debug', 'stream', `${(this.bytes / 2 ** 20).toFixed(0)} MiB sent`);
    }
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
      for (; ahead.length < 2 * readers.size && next < to; next += CHUNK) {
        const into = this.spare.pop();
        ahead.push({ at: next, chunk: readers.run({ fd, at: next, length: Math.min(CHUNK, to - next), into }, into ? [into.buffer as ArrayBuffer] : []) });
      }
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
      this.spare.push(c.data!); // written: read into again
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
        done += writeSync(SINK, b, done, b.length - done, this.sink.file ? this.bytes + done : null);
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
      this.writebacks.push(native().startWriteback(SINK).catch(() => undefined)); // a hint; the final fsync makes it durable
    }
  }
}

const args = JSON.parse(process.argv[2] ?? '{}') as SenderArgs;
// The terminal's Ctrl-C is the checkpoint's to act on: it ends this process when it must.
process.on('SIGINT', () => undefined);
process.on('SIGQUIT', () => undefined);
// Standard output may be a pipe node made non-blocking (in this process or
// the parent, which share it): this process blocks in write(2) instead; put back at the end.
let wasBlocking = true;
try {
  wasBlocking = native().setBlocking(SINK, true);
} catch {
  // not ours to change: EAGAIN is waited out in write()
}
if (!args.file) native().growPipe(SINK);
const s = new Sender(args);
// One per core beside this process's and the checkpoint's, at most 3.
const readers = new WorkerPool<ChunkRequest, ChunkReply>(new URL('./stream-chunk-reader.js', import.meta.url), Math.max(1, Math.min(3, availableParallelism() - 2)), 'stream chunk reader');
const followed: { slot: number; path: string; fd: number; at: number }[] = [];
/** How far each followed file is written, by slot. */
const written = new Map<number, number>();
/** Sent by the parent, taken up by run(), which owns every write. */
const posted: { slot: number; path: string; source: string }[] = [];
let finish: string | undefined;
let wake: (() => void) | undefined;

/** Frames as they reach the disk, while the checkpoint runs; then the rest of the complete image. */
async function run(): Promise<StreamSummary> {
  const takeUp = () => {
    for (const f of posted.splice(0)) {
      s.record(Kind.FILE, f.path, 0);
      followed.push({ slot: f.slot, path: f.path, fd: openSync(f.source, 'r'), at: 0 });
    }
  };
  while (finish === undefined) {
    takeUp();
    let moved = false;
    for (const f of followed) {
      const ready = written.get(f.slot) ?? 0;
      if (ready > f.at) {
        await s.range(f.path, f.fd, f.at, ready);
        f.at = ready;
        moved = true;
      }
    }
    if (!moved) await new Promise<void>((r) => (wake = r)); // the parent's next message
  }
  takeUp();
  for (const f of followed) {
    const ready = written.get(f.slot) ?? 0;
    if (ready > f.at) await s.range(f.path, f.fd, f.at, ready);
    f.at = Math.max(f.at, ready);
    closeSync(f.fd);
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

process.on('message', (m: SenderMessage) => {
  if (m.op === 'follow') posted.push({ slot: m.slot, path: m.path, source: m.source });
  else if (m.op === 'written') written.set(m.slot, m.bytes);
  else finish = m.dir;
  wake?.();
  wake = undefined;
});
// Reported once every writeback has completed, and with a pipe's end let go:
// its reader sees end-of-file as the report goes out.
let reported = false;
const report = (r: SenderReply) => {
  reported = true;
  process.send!(r, () => process.disconnect());
};
// The checkpoint's process gone (killed): the stream stops short, and this
// process with it; gone already while this one started, too.
process.on('disconnect', () => reported || process.exit(1));
if (!process.connected) process.exit(1);
run()
  .finally(async () => {
    if (!wasBlocking) native().setBlocking(SINK, false);
    await readers.close();
    await s.settled();
  })
  .then(
    (done) => {
      if (!args.file) native().endOutput(SINK);
      report({ done });
    },
    (e: unknown) => report({ error: e instanceof GpuckptError ? { code: e.code, message: e.message } : { code: 'INTERNAL', message: String((e as Error)?.stack ?? e) } }),
  );
