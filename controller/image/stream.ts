/**
 * An image as one stream (`checkpoint -o -` and `--export FILE`, `restore -`
 * and `--import FILE`): a header, then records that make the image's
 * directories and files and put bytes at offsets of them, then an end
 * record that lists every file's size. Every record's payload carries a
 * CRC-32 and the end's totals catch a lost or repeated record, on top of
 * the image's own checksums (manifest SHA-256, zstd content checksums): a
 * damaged stream is refused before anything is restored from it.
 *
 * The sender follows files still being written (a pool image's frames are
 * sent as they reach the disk), so a stream costs little beyond the image.
 *
 * Record: kind u8, path length u16, payload length u32, offset u64 (DATA:
 * where the payload goes in the file), CRC-32 of the payload u32, path
 * (UTF-8, relative to the image), payload. Files are made 0600 and
 * directories 0700, as images are.
 */
import { closeSync, fstatSync, mkdirSync, openSync, readdirSync, readSync, writeSync } from 'node:fs';
import { isAbsolute, join, normalize, sep } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { crc32 } from 'node:zlib';
import { GpuckptError } from '../base/errors.js';
import type { ImageWriter } from './writer.js';
import { native } from '../../native/index.js';

const MAGIC = Buffer.from('GPCKSTRM');
const VERSION = 1;
const HEADER_BYTES = MAGIC.length + 4;
const RECORD_BYTES = 1 + 2 + 4 + 8 + 4;
/** Bytes of file data per record. */
const CHUNK = 4 << 20;
const MAX_PAYLOAD = 64 << 20;

const enum Kind {
  DIR = 1,
  FILE = 2,
  DATA = 3,
  END = 4,
}

interface EndSummary {
  /** Every file, its size. */
  files: Record<string, number>;
  dataRecords: number;
  dataBytes: number;
}

/** A file of the image being written while it is sent: its writer says how far it may be read (the caller closes fd). */
export interface FollowedFile {
  /** Relative to the image. */
  path: string;
  writer: ImageWriter;
  /** Its data file, opened before the writer may rename its directory. */
  fd: number;
}

/** Where a stream goes. */
export interface StreamSink {
  write(bytes: Uint8Array): Promise<void>;
}

/** Bytes a pipe may hold in this process before the sender waits. */
const PIPE_BUFFERED = 64 << 20;
/** Bytes written to a file between two starts of its writeback (as image writers do). */
const WRITEBACK_EVERY = 64 << 20;

/** A pipe or socket (standard output). */
export function pipeSink(out: Writable): StreamSink {
  let failed: Error | undefined;
  out.on('error', (e) => (failed ??= e));
  const broken = (e: Error) => new GpuckptError('IMAGE_WRITE_FAILED', `cannot stream the image: ${e.message}`, { cause: e });
  return {
    async write(bytes) {
      if (failed) throw broken(failed);
      if (out.write(bytes) || out.writableLength < PIPE_BUFFERED) return;
      await new Promise<void>((res) => out.once('drain', res));
    },
  };
}

/** A file written in place, its writeback started as it grows so that the final fsync finds little to do. */
export function fileSink(fd: number): StreamSink {
  let at = 0;
  let unflushed = 0;
  return {
    async write(bytes) {
      for (let done = 0; done < bytes.length; ) done += writeSync(fd, bytes, done, bytes.length - done, at + done);
      at += bytes.length;
      unflushed += bytes.length;
      if (unflushed >= WRITEBACK_EVERY) {
        unflushed = 0;
        await native().startWriteback(fd).catch(() => undefined); // a hint; the final fsync makes it durable
      }
    },
  };
}

export interface StreamSummary {
  bytes: number;
  files: number;
}

class Sender {
  private readonly files: Record<string, number> = {};
  private dataRecords = 0;
  private dataBytes = 0;
  bytes = 0;

  constructor(private readonly out: StreamSink) {}

  get fileCount(): number {
    return Object.keys(this.files).length;
  }

  async record(kind: Kind, path: string, offset: number, payload: Uint8Array = new Uint8Array(0)): Promise<void> {
    // The header with the first record: a checkpoint refused before its
    // first frame leaves the stream empty, not a stream cut short.
    if (!this.bytes) {
      const head = Buffer.alloc(HEADER_BYTES);
      MAGIC.copy(head);
      head.writeUInt32LE(VERSION, MAGIC.length);
      await this.write(head);
    }
    const name = Buffer.from(path);
    const h = Buffer.alloc(RECORD_BYTES);
    h.writeUInt8(kind, 0);
    h.writeUInt16LE(name.length, 1);
    h.writeUInt32LE(payload.length, 3);
    h.writeBigUInt64LE(BigInt(offset), 7);
    h.writeUInt32LE(crc32(payload), 15);
    await this.write(Buffer.concat([h, name]));
    if (payload.length) await this.write(payload);
    if (kind === Kind.FILE) this.files[path] = 0;
    if (kind === Kind.DATA) {
      this.dataRecords++;
      this.dataBytes += payload.length;
      this.files[path] = Math.max(this.files[path] ?? 0, offset + payload.length);
    }
  }

  /** Bytes [from, to) of fd as DATA records of path. */
  async range(path: string, fd: number, from: number, to: number): Promise<void> {
    for (let at = from; at < to; ) {
      const buf = Buffer.allocUnsafe(Math.min(CHUNK, to - at));
      const n = readSync(fd, buf, 0, buf.length, at);
      if (n <= 0) throw new GpuckptError('IMAGE_READ_FAILED', `cannot stream ${path}: it ends at ${at}, before ${to}`);
      await this.record(Kind.DATA, path, at, buf.subarray(0, n));
      at += n;
    }
  }

  async end(): Promise<void> {
    const summary: EndSummary = { files: this.files, dataRecords: this.dataRecords, dataBytes: this.dataBytes };
    await this.record(Kind.END, '', 0, Buffer.from(JSON.stringify(summary)));
  }

  private write(b: Uint8Array): Promise<void> {
    this.bytes += b.length;
    return this.out.write(b);
  }
}

/**
 * Streams an image: first the files of `follow` as their writers write
 * them (until `done` settles), then everything under dir once it is the
 * complete image, the followed files from where they were left.
 */
export async function sendImage(out: StreamSink, dir: () => string, done: Promise<unknown>, follow: () => FollowedFile[]): Promise<StreamSummary> {
  const s = new Sender(out);
  const sent = new Map<number, { path: string; at: number }>();
  let finished = false;
  done.then(
    () => (finished = true),
    () => (finished = true),
  );
  // Frames as they reach the disk, while the checkpoint runs.
  while (!finished) {
    let moved = false;
    for (const f of follow()) {
      let st = sent.get(f.fd);
      if (!st) {
        sent.set(f.fd, (st = { path: f.path, at: 0 }));
        await s.record(Kind.FILE, f.path, 0);
      }
      const ready = Number(f.writer.writtenPrefix);
      if (ready > st.at) {
        await s.range(f.path, f.fd, st.at, ready);
        st.at = ready;
        moved = true;
      }
    }
    if (!moved) await Promise.race([done.catch(() => undefined), new Promise((r) => setTimeout(r, 5))]);
  }
  await done; // a failed checkpoint fails the stream: no end record
  const followed = new Map([...sent.values()].map((v) => [v.path, v.at]));
  const root = dir();
  const walk = async (rel: string): Promise<void> => {
    for (const e of readdirSync(join(root, rel), { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const path = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) {
        await s.record(Kind.DIR, path, 0);
        await walk(path);
      } else if (e.isFile()) {
        const from = followed.get(path);
        if (from === undefined) await s.record(Kind.FILE, path, 0);
        const fd = openSync(join(root, path), 'r');
        try {
          await s.range(path, fd, from ?? 0, fstatSync(fd).size);
        } finally {
          closeSync(fd);
        }
      } else throw new GpuckptError('IMAGE_CORRUPT', `cannot stream ${join(root, path)}: not a regular file or directory`);
    }
  };
  await walk('');
  await s.end();
  return { bytes: s.bytes, files: s.fileCount };
}

/** Reads exactly n bytes at a time from a stream. */
class Reader {
  private chunks: Buffer[] = [];
  private have = 0;
  private readonly it: AsyncIterator<Buffer>;
  bytes = 0;

  constructor(input: Readable) {
    this.it = input[Symbol.asyncIterator]();
  }

  /** n bytes, or undefined at the end of the stream (when atEnd allows it there). */
  async read(n: number, what: string): Promise<Buffer> {
    while (this.have < n) {
      const r = await this.it.next();
      if (r.done) throw new GpuckptError('IMAGE_TRUNCATED', `image stream is truncated: it ends ${this.bytes + this.have} bytes in, inside ${what}`);
      this.chunks.push(r.value);
      this.have += r.value.length;
    }
    const all = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
    const out = all.subarray(0, n);
    const rest = all.subarray(n);
    this.chunks = rest.length ? [rest] : [];
    this.have = rest.length;
    this.bytes += n;
    return out;
  }

  async atEnd(): Promise<boolean> {
    if (this.have) return false;
    const r = await this.it.next();
    if (r.done) return true;
    this.chunks.push(r.value);
    this.have += r.value.length;
    return !r.value.length && this.atEnd();
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
 * Receives a stream into dir (which must exist, empty), checking every
 * record; resolves only once the end record proved the image whole.
 */
export async function receiveImage(input: Readable, dir: string): Promise<StreamSummary> {
  const r = new Reader(input);
  const head = await r.read(HEADER_BYTES, 'the header');
  if (!head.subarray(0, MAGIC.length).equals(MAGIC)) throw new GpuckptError('IMAGE_NOT_AN_IMAGE', 'not a gpuckpt image stream (no GPCKSTRM header): made by checkpoint -o - or --export');
  const version = head.readUInt32LE(MAGIC.length);
  if (version !== VERSION) throw new GpuckptError('IMAGE_VERSION', `image stream version ${version}; this gpuckpt reads version ${VERSION}`);
  const fds = new Map<string, number>();
  const sizes: Record<string, number> = {};
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
      if (crc32(payload) !== crc) throw new GpuckptError('IMAGE_DATA_CORRUPT', `image data is corrupt: the stream's record at byte ${at} (${name || 'end'}) fails its CRC-32`);
      if (kind === Kind.END) {
        const end = JSON.parse(payload.toString()) as EndSummary;
        const missing = Object.entries(end.files).find(([p, size]) => sizes[p] === undefined || sizes[p]! < size);
        if (missing || end.dataRecords !== dataRecords || end.dataBytes !== dataBytes || Object.keys(sizes).length !== Object.keys(end.files).length)
          throw new GpuckptError('IMAGE_TRUNCATED', `image stream is incomplete: ${missing ? `${missing[0]} has ${sizes[missing[0]] ?? 'no'} of its ${missing[1]} bytes` : `${dataRecords} data records of ${end.dataRecords}, ${dataBytes} bytes of ${end.dataBytes}`}`);
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
        for (let done = 0; done < payload.length; ) done += writeSync(fd, payload, done, payload.length - done, offset + done);
        sizes[path] = Math.max(sizes[path]!, offset + payload.length);
        dataRecords++;
        dataBytes += payload.length;
      } else throw new GpuckptError('IMAGE_CORRUPT', `image stream is corrupt: record kind ${kind} at byte ${at}`);
    }
  } finally {
    for (const fd of fds.values()) closeSync(fd);
  }
}
