/**
 * An image as one stream (`checkpoint -o -` and `--export FILE`, `restore -`
 * and `--import FILE`): a header, then records that make the image's
 * directories and files and put bytes at offsets of them, then an end
 * record that lists every file's size. Every record's payload carries a
 * CRC-32 and the end's totals catch a lost or repeated record, on top of
 * the image's own checksums (manifest SHA-256, zstd content checksums): a
 * damaged stream is refused before anything is restored from it.
 *
 * The sender (stream-sender.ts, a process of its own) follows files still being
 * written (a pool image's frames are sent as they reach the disk), so a
 * stream costs little beyond the image; the layout is stream-format.ts's.
 */
import { closeSync, mkdirSync, openSync, read } from 'node:fs';
import { availableParallelism } from 'node:os';
import { isAbsolute, join, normalize, sep } from 'node:path';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { crc32 } from 'node:zlib';
import { GpuckptError, type ErrorCode } from '../base/errors.js';
import { log, logEnabled } from '../base/log.js';
import type { ImageWriter } from './writer.js';
import { HEADER_BYTES, Kind, MAGIC, MAX_PAYLOAD, OLDEST_VERSION, RECORD_BYTES, TRACE_BYTES, V1_HEADER_BYTES, VERSION, type EndSummary, type StreamSummary } from './stream-format.js';
import type { SenderArgs, SenderMessage, SenderReply } from './stream-sender.js';
import { native } from '../../native/index.js';
import type { ReceivedRecord, ReceiverReply } from './stream-receiver.js';
import { ownBuffer, WorkerPool } from '../base/worker-pool.js';

export type { StreamSummary } from './stream-format.js';

/** A file of the image being written while it is sent: its writer says how far it may be read (the caller closes fd). */
export interface FollowedFile {
  /** Relative to the image. */
  path: string;
  writer: ImageWriter;
  /** Its data file, opened before the writer may rename its directory. */
  fd: number;
}

/** Where a stream goes: a pipe (standard output) or a file written in place. */
export interface StreamSink {
  fd: number;
  file: boolean;
}

/**
 * Streams an image from a process of its own (stream-sender.ts), which
 * writes to sink.fd: first the files of `follow` as their writers write
 * them (until `done` settles), then everything under dir once it is the
 * complete image, the followed files from where they were left. A failed
 * checkpoint fails the stream: no end record. A pipe's end is let go once
 * the end record is in it, so that its reader sees end-of-file then.
 */
export async function sendImage(sink: StreamSink, dir: () => string, done: Promise<unknown>, follow: () => FollowedFile[], bound = 0): Promise<StreamSummary> {
  const child = spawn(process.execPath, [fileURLToPath(new URL('./stream-sender.js', import.meta.url)), JSON.stringify({ file: sink.file, bound } satisfies SenderArgs)], {
    stdio: ['ignore', sink.fd, 'inherit', 'ipc'],
  });
  // 'close': the process ended and its messages were all read.
  const ended = new Promise<void>((res) => child.once('close', () => res()));
  let reported = false;
  const result = new Promise<StreamSummary>((res, rej) => {
    const failed = (e: Error) => new GpuckptError('INTERNAL', `stream sender failed: ${e.message}`, { cause: e });
    // A send into a sender that has just ended (its reader gone) fails with
    // EPIPE before its own word on why is read: that word, read by 'close',
    // is the one to give (CI saw the EPIPE win).
    let sendFailure: Error | undefined;
    child.once('message', (r: SenderReply) => ('done' in r ? res(r.done) : rej(new GpuckptError(r.error.code as ErrorCode, r.error.message))));
    child.once('error', (e) => (child.pid === undefined ? rej(failed(e)) : (sendFailure = e)));
    child.once('close', (code, signal) => rej(sendFailure ? failed(sendFailure) : new GpuckptError('INTERNAL', `stream sender ended (${signal ?? `exit status ${code}`}) before it said how the stream went`)));
  });
  result.then(
    () => (reported = true),
    () => (reported = true),
  ); // awaited below
  const slots = new Map<FollowedFile, { slot: number; sent: bigint }>();
  const post = (m: SenderMessage) => child.connected && child.send(m);
  let traced = 0n;
  const update = () => {
    for (const f of follow()) {
      let at = slots.get(f);
      if (!at) {
        slots.set(f, (at = { slot: slots.size, sent: 0n }));
        // The parent's descriptor, not the path: the writer renames its directory at the end.
        post({ op: 'follow', slot: at.slot, path: f.path, source: `/proc/${process.pid}/fd/${f.fd}` });
      }
      const prefix = f.writer.writtenPrefix;
      if (prefix > at.sent) {
        at.sent = prefix;
        post({ op: 'written', slot: at.slot, bytes: Number(prefix) });
      }
      if (at.slot === 0 && prefix >= traced + BigInt(TRACE_BYTES) && logEnabled('debug')) {
        traced = prefix;
        log('debug', 'stream', `${traced / 2n ** 20n} MiB of ${f.path} written`);
      }
    }
  };
  const timer = setInterval(update, 2);
  try {
    // The sender failing (its reader gone) stops the wait; the checkpoint goes on.
    await Promise.race([done, result]);
    await done;
    update();
    post({ op: 'finish', dir: dir() });
    const summary = await result;
    if (!sink.file) native().endOutput(sink.fd);
    return summary;
  } finally {
    clearInterval(timer);
    // A failed checkpoint: the stream stops short, with no end record.
    if (!reported) child.kill('SIGKILL');
    await ended;
  }
}

/** How long a read of a non-blocking descriptor with nothing in it waits before it tries again. */
const EMPTY_WAIT_MS = 1;

/**
 * Reads exactly n bytes at a time from fd (a pipe, a socket or a file), each
 * into a buffer of its own that a worker takes without a copy (a Readable
 * copied every short read of a pipe, then each record that spanned two).
 */
class FdReader {
  bytes = 0;
  /** Buffers of payloads written, to read into again: a fresh one per record was an mmap and its page faults. */
  readonly spare: ArrayBuffer[] = [];

  constructor(private readonly fd: number) {}

  /** n bytes; the stream ending first is an error that says inside what. */
  async read(n: number, what: string): Promise<Buffer> {
    const i = this.spare.findIndex((b) => b.byteLength === n);
    const out = i < 0 ? Buffer.allocUnsafeSlow(n) : Buffer.from(this.spare.splice(i, 1)[0]!);
    for (let k = 0; k < n; ) {
      const got = await this.readSome(out, k, n - k);
      if (!got) throw new GpuckptError('IMAGE_TRUNCATED', `image stream is truncated: it ends ${this.bytes + k} bytes in, inside ${what}`);
      k += got;
    }
    this.bytes += n;
    return out;
  }

  async atEnd(): Promise<boolean> {
    return (await this.readSome(Buffer.alloc(1), 0, 1)) === 0;
  }

  /** One read(2) in the thread pool: 0 at the end of the stream. */
  private async readSome(into: Buffer, at: number, n: number): Promise<number> {
    for (;;) {
      try {
        return await new Promise<number>((res, rej) => read(this.fd, into, at, n, null, (e, got) => (e ? rej(e) : res(got))));
      } catch (e) {
        // Left non-blocking (not ours to change): wait for the sender.
        if ((e as NodeJS.ErrnoException).code === 'EAGAIN') await new Promise((r) => setTimeout(r, EMPTY_WAIT_MS));
        else throw new GpuckptError('IMAGE_READ_FAILED', `cannot read the image stream: ${(e as Error).message}`, { cause: e });
      }
    }
  }
}

/** A path of the stream, checked to stay inside the image. */
function safePath(path: string, at: number): string {
  const norm = normalize(path);
  if (!path || isAbsolute(path) || norm !== path || norm.split(sep).some((p) => p === '..' || p === '.' || p === ''))
    throw new GpuckptError('IMAGE_CORRUPT', `image stream is corrupt: record at byte ${at} names "${path}", not a path inside an image`);
  return norm;
}

/**
 * Receives the stream read from fd into the directory dirFor gives (an
 * empty one that exists; bound: at most the image's bytes, as the sender
 * said, else undefined), checking every record; resolves only once the end
 * record proved the image whole.
 */
export async function receiveImage(fd: number, dirFor: (bound: number | undefined) => Promise<string>): Promise<StreamSummary> {
  const r = new FdReader(fd);
  const head = await r.read(V1_HEADER_BYTES, 'the header');
  if (!head.subarray(0, MAGIC.length).equals(MAGIC)) throw new GpuckptError('IMAGE_NOT_AN_IMAGE', 'not a gpuckpt image stream (no GPCKSTRM header): made by checkpoint -o - or --export');
  const version = head.readUInt32LE(MAGIC.length);
  if (version < OLDEST_VERSION || version > VERSION) throw new GpuckptError('IMAGE_VERSION', `image stream version ${version}; this gpuckpt reads versions ${OLDEST_VERSION} to ${VERSION}`);
  const bound = version >= 2 ? Number((await r.read(HEADER_BYTES - V1_HEADER_BYTES, 'the header')).readBigUInt64LE(0)) : 0;
  const dir = await dirFor(bound || undefined);
  const fds = new Map<string, number>();
  const sizes: Record<string, number> = {};
  // Payloads are checked and written by workers while the next are read.
  const writes = new ReceiverPool(receiverWorkers(), (b) => r.spare.length < SPARE_PAYLOADS && r.spare.push(b));
  let dataRecords = 0;
  let dataBytes = 0;
  try {
    for (;;) {
      const at = r.bytes;
      const h = await r.read(RECORD_BYTES, `the record at byte ${at}`);
      const kind = h.readUInt8(0);
      const nameLength = h.readUInt16LE(1);
      const length = h.readUInt32LE(3);
      const offset = Number(h.readBigUInt64LE(7));
      const crc = h.readUInt32LE(15);
      if (length > MAX_PAYLOAD || !Number.isSafeInteger(offset)) throw new GpuckptError('IMAGE_CORRUPT', `image stream is corrupt: the record at byte ${at} is malformed`);
      const name = (await r.read(nameLength, `the record at byte ${at}`)).toString();
      const payload = await r.read(length, `the record at byte ${at}`);
      // A data record's CRC is checked by the worker that writes it.
      if (kind !== Kind.DATA && crc32(payload) !== crc) throw new GpuckptError('IMAGE_DATA_CORRUPT', `image data is corrupt: the stream's record at byte ${at} (${name || 'end'}) fails its CRC-32`);
      if (kind === Kind.END) {
        log('debug', 'stream', `end record read at byte ${at}`);
        await writes.drain();
        const end = JSON.parse(payload.toString()) as EndSummary;
        const missing = Object.entries(end.files).find(([p, size]) => sizes[p] === undefined || sizes[p]! < size);
        if (missing || end.dataRecords !== dataRecords || end.dataBytes !== dataBytes || Object.keys(sizes).length !== Object.keys(end.files).length)
          throw new GpuckptError('IMAGE_TRUNCATED', `image stream is incomplete: ${missing ? `${missing[0]} has ${sizes[missing[0]] ?? 'no'} of its ${missing[1]} bytes` : `${dataRecords} data records of ${end.dataRecords}, ${dataBytes} bytes of ${end.dataBytes}`}`);
        log('debug', 'stream', 'every record written; waiting for the end of the stream');
        if (!(await r.atEnd())) throw new GpuckptError('IMAGE_CORRUPT', `image stream is corrupt: bytes follow its end record at byte ${at}`);
        return { bytes: r.bytes, files: Object.keys(sizes).length };
      }
      const path = safePath(name, at);
      if (kind === Kind.DIR) mkdirSync(join(dir, path), { mode: 0o700 });
      else if (kind === Kind.FILE) {
        if (fds.has(path)) throw new GpuckptError('IMAGE_CORRUPT', `image stream is corrupt: ${path} made twice (byte ${at})`);
        fds.set(path, openSync(join(dir, path), 'wx', 0o600));
        sizes[path] = 0;
      } else if (kind === Kind.DATA) {
        const fd = fds.get(path);
        if (fd === undefined) throw new GpuckptError('IMAGE_CORRUPT', `image stream is corrupt: data for ${path} before the file (byte ${at})`);
        sizes[path] = Math.max(sizes[path]!, offset + length);
        dataRecords++;
        dataBytes += length;
        await writes.add(fd, payload, offset, crc, at, path); // the payload is the worker's now
      } else throw new GpuckptError('IMAGE_CORRUPT', `image stream is corrupt: record kind ${kind} at byte ${at}`);
    }
  } finally {
    await writes.drain().catch(() => undefined);
    await writes.close();
    for (const fd of fds.values()) closeSync(fd);
  }
}

/** Records being checked and written at once, per worker: 4 MiB each. */
const RECORDS_PER_WORKER = 2;
/** Payload buffers kept to read into again. */
const SPARE_PAYLOADS = 4;

/**
 * Data records checked (CRC-32) and written by worker threads
 * (stream-receiver.ts), at most RECORDS_PER_WORKER each at once; the
 * first failure is thrown by add or drain.
 */
class ReceiverPool {
  private readonly pool: WorkerPool<ReceivedRecord, ReceiverReply>;
  private readonly inFlight = new Set<Promise<void>>();
  private failure: unknown;

  /** recycle: takes each payload's buffer back once written. */
  constructor(
    count: number,
    private readonly recycle: (buffer: ArrayBuffer) => unknown,
  ) {
    this.pool = new WorkerPool(new URL('./stream-receiver.js', import.meta.url), count, 'stream receiver');
  }

  /** Hands over the record at stream byte at, once a worker has room; the payload is the worker's then. */
  async add(fd: number, payload: Buffer, offset: number, crc: number, at: number, name: string): Promise<void> {
    while (this.inFlight.size >= RECORDS_PER_WORKER * this.pool.size) await Promise.race(this.inFlight);
    if (this.failure) throw this.failure;
    const own = ownBuffer(payload);
    const done: Promise<void> = this.pool
      .run({ fd, offset, crc, payload: new Uint8Array(own) }, [own])
      .then((r) => {
        if (r.corrupt) throw new GpuckptError('IMAGE_DATA_CORRUPT', `image data is corrupt: the stream's record at byte ${at} (${name}) fails its CRC-32`);
        if (r.failedWrite) throw Object.assign(new Error(r.failedWrite.message), { code: r.failedWrite.code });
        if (r.payload) this.recycle(r.payload.buffer as ArrayBuffer);
      })
      .catch((e: unknown) => void (this.failure ??= e))
      .finally(() => this.inFlight.delete(done));
    this.inFlight.add(done);
  }

  async drain(): Promise<void> {
    await Promise.all(this.inFlight);
    if (this.failure) throw this.failure;
  }

  close(): Promise<void> {
    return this.pool.close();
  }
}

/** Workers checking and writing: the cores beside the reading thread, at most 4 (about 1 GB/s each). */
const receiverWorkers = () => Math.max(1, Math.min(4, availableParallelism() - 1));
