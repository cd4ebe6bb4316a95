/**
 * The image stream (controller/image/stream.ts) on its own: a tree sent
 * while one of its files is still written arrives identical; every way a
 * stream can be damaged (a flipped byte, a lost record, a cut, a path out
 * of the image, bytes after the end) is refused.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { appendFileSync, closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { open } from 'node:fs/promises';
import type { ImageWriter } from '../controller/image/writer.js';
import { native } from '../native/index.js';

// From dist: the sender runs as a process of its own (dist/controller/image/stream-sender.js).
const { receiveImage, sendImage } = await import(new URL('../dist/controller/image/stream.js', import.meta.url).href);

const root = mkdtempSync(join(tmpdir(), 'gpuckpt-stream-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** Everything under dir: relative path -> contents. */
function tree(dir: string, rel = ''): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of readdirSync(join(dir, rel), { withFileTypes: true })) {
    const p = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory()) Object.assign(out, tree(dir, p));
    else out[p] = readFileSync(join(dir, p)).toString('hex');
  }
  return out;
}

/** What run streams into a file. */
async function collect(run: (sink: { fd: number; file: boolean }) => Promise<unknown>): Promise<Buffer> {
  const path = join(root, `stream-${Math.random().toString(16).slice(2)}`);
  const fd = openSync(path, 'w');
  try {
    await run({ fd, file: true });
  } finally {
    closeSync(fd);
  }
  return readFileSync(path);
}

/** An image dir with a member, a CRIU part and an empty file; pool.zst written while it is sent. */
async function streamOf(name: string): Promise<{ src: string; bytes: Buffer }> {
  const src = join(root, name);
  mkdirSync(join(src, 'members', '42'), { recursive: true });
  mkdirSync(join(src, 'criu'));
  writeFileSync(join(src, 'manifest'), 'manifest bytes');
  writeFileSync(join(src, 'criu', 'core-1.img'), Buffer.alloc(5000, 3));
  writeFileSync(join(src, 'criu', 'empty'), '');
  writeFileSync(join(src, 'members', '42', 'pool.zst'), Buffer.alloc(9 << 20, 9));
  const pool = join(src, 'pool.zst');
  writeFileSync(pool, '');
  // A writer whose written prefix lags what is on the disk, as appends in flight do.
  let prefix = 0n;
  const writer = { get writtenPrefix() { return prefix; } } as unknown as ImageWriter;
  const fd = openSync(pool, 'r');
  let finish!: () => void;
  const done = new Promise<void>((res) => (finish = res));
  const writing = (async () => {
    for (let i = 0; i < 6; i++) {
      appendFileSync(pool, Buffer.alloc(3 << 20, i + 1));
      await new Promise((r) => setTimeout(r, 10));
      prefix = BigInt(i * (3 << 20)); // the last frame still "in flight"
    }
    finish();
  })();
  const followed = [{ path: 'pool.zst', writer, fd }];
  const bytes = await collect((sink) => sendImage(sink, () => src, done, () => followed));
  await writing;
  closeSync(fd);
  return { src, bytes };
}

/** A receiver's dirFor: a fresh directory under root; what bound the sender gave goes to said. */
const into = (name: string, said: { bound?: number } = {}) => async (bound: number | undefined) => {
  said.bound = bound;
  const dir = join(root, name);
  mkdirSync(dir);
  return dir;
};

/**
 * receiveImage of bytes as a user's pipe gives them: from a FIFO that dd
 * fills in pieces of 1000 bytes, so reads come short and records span them.
 */
async function receiveFrom(bytes: Buffer, dirFor: ReturnType<typeof into>): Promise<{ files: number }> {
  const id = Math.random().toString(16).slice(2);
  const file = join(root, `bytes-${id}`);
  const fifo = join(root, `fifo-${id}`);
  writeFileSync(file, bytes);
  native().makeFifo(fifo);
  const dd = spawn('dd', [`if=${file}`, `of=${fifo}`, 'bs=1000', 'status=none'], { stdio: 'ignore' });
  const ended = new Promise((res) => dd.on('close', res));
  const input = await open(fifo, 'r');
  try {
    return await receiveImage(input.fd, dirFor);
  } finally {
    await input.close(); // a refused stream: dd ends on EPIPE
    await ended;
  }
}

const receive = async (bytes: Buffer, name: string) => {
  await receiveFrom(bytes, into(name));
  return join(root, name);
};

describe('the image stream', () => {
  it('sent into a file, past several writebacks at once, then received whole', async () => {
    // 200 MiB sent in one go after the image is complete: the sender starts
    // a writeback every 64 MiB and waits for them before it reports (one
    // still pending when its thread ended aborted the process; 1.5 GB sent
    // so did every time, 200 MiB here rarely does: the data is checked).
    const dir = join(root, 'big');
    mkdirSync(dir);
    const fd = openSync(join(dir, 'pool.zst'), 'w');
    const piece = Buffer.alloc(8 << 20);
    for (let i = 0; i < 25; i++) writeSync(fd, piece.fill(i), 0, piece.length, i * piece.length);
    closeSync(fd);
    const stream = await collect((sink) => sendImage(sink, () => dir, Promise.resolve(), () => [], 300 << 20));
    const said: { bound?: number } = {};
    expect((await receiveFrom(stream, into('big-received', said))).files).toBe(1);
    expect(said.bound).toBe(300 << 20); // the receiver knew how much at most, before any of it came
    expect(readFileSync(join(root, 'big-received', 'pool.zst')).equals(readFileSync(join(dir, 'pool.zst')))).toBe(true);
  });

  it('fails, naming the file, when a followed file is shorter than its writer said', async () => {
    const src = join(root, 'short');
    mkdirSync(src);
    writeFileSync(join(src, 'pool.zst'), Buffer.alloc(5 << 20, 1));
    const fd = openSync(join(src, 'pool.zst'), 'r');
    const writer = { writtenPrefix: BigInt(12 << 20) } as unknown as ImageWriter;
    try {
      await expect(collect((sink) => sendImage(sink, () => src, new Promise((r) => setTimeout(r, 50)), () => [{ path: 'pool.zst', writer, fd }]))).rejects.toMatchObject({
        code: 'IMAGE_READ_FAILED',
        message: `cannot stream pool.zst: it ends at ${5 << 20}, before ${12 << 20}`,
      });
    } finally {
      closeSync(fd);
    }
  });

  it('carries a tree whose file is still written, identical', async () => {
    const { src, bytes } = await streamOf('send');
    const dir = await receive(bytes, 'got');
    expect(tree(dir)).toEqual(tree(src));
    // A version 1 stream (no bound in its header) from an older gpuckpt is still read.
    const v1 = Buffer.concat([Buffer.from('GPCKSTRM'), Buffer.from([1, 0, 0, 0]), bytes.subarray(20)]);
    const said: { bound?: number } = { bound: -1 };
    await receiveFrom(v1, into('got-v1', said));
    expect(said.bound).toBeUndefined();
    expect(tree(join(root, 'got-v1'))).toEqual(tree(src));
  });

  it('refuses a flipped byte, a lost record, a cut, a path out of the image and bytes after the end', async () => {
    const { bytes } = await streamOf('send-bad');
    const flipped = Buffer.from(bytes);
    flipped[bytes.length >> 1] ^= 1;
    await expect(receive(flipped, 'flipped')).rejects.toMatchObject({ code: 'IMAGE_DATA_CORRUPT' });
    await expect(receive(bytes.subarray(0, bytes.length - 7), 'cut')).rejects.toMatchObject({ code: 'IMAGE_TRUNCATED' });
    await expect(receive(Buffer.concat([bytes, Buffer.from('x')]), 'after')).rejects.toMatchObject({ code: 'IMAGE_CORRUPT', message: expect.stringMatching(/bytes follow its end record/) });
    // The first data record of pool.zst dropped: its bytes are missing at the end.
    const lost = dropRecord(bytes, 1);
    await expect(receive(lost, 'lost')).rejects.toMatchObject({ code: 'IMAGE_TRUNCATED', message: expect.stringMatching(/^image stream is incomplete: /) });
    const escaping = renameRecord(bytes, 0, '../../etc/x');
    await expect(receive(escaping, 'escaping')).rejects.toMatchObject({ code: 'IMAGE_CORRUPT', message: expect.stringMatching(/names "..\/..\/etc\/x", not a path inside an image/) });
    await expect(receive(Buffer.from('GPCKSTRM\x07\0\0\0'), 'version')).rejects.toMatchObject({ code: 'IMAGE_VERSION' });
  });
});

/** Offsets of the records of a stream (after its 20-byte header). */
function records(bytes: Buffer): { at: number; end: number; nameAt: number; nameLength: number }[] {
  const out = [];
  for (let at = 20; at < bytes.length; ) {
    const nameLength = bytes.readUInt16LE(at + 1);
    const length = bytes.readUInt32LE(at + 3);
    const end = at + 19 + nameLength + length;
    out.push({ at, end, nameAt: at + 19, nameLength });
    at = end;
  }
  return out;
}

function dropRecord(bytes: Buffer, index: number): Buffer {
  const r = records(bytes)[index]!;
  return Buffer.concat([bytes.subarray(0, r.at), bytes.subarray(r.end)]);
}

function renameRecord(bytes: Buffer, index: number, name: string): Buffer {
  const r = records(bytes)[index]!;
  const h = Buffer.from(bytes.subarray(r.at, r.nameAt));
  h.writeUInt16LE(Buffer.byteLength(name), 1);
  return Buffer.concat([bytes.subarray(0, r.at), h, Buffer.from(name), bytes.subarray(r.nameAt + r.nameLength)]);
}

describe('the sender process', () => {
  it('ends when the checkpoint that started it is killed', async () => {
    // A controller streaming an image that never completes, killed.
    const url = new URL('../dist/controller/image/stream.js', import.meta.url).href;
    const script = `const m = await import(${JSON.stringify(url)}); m.sendImage({ fd: 1, file: false }, () => '/nowhere', new Promise(() => {}), () => []);`;
    const controller = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    const childOf = (pid: number) => readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
    let sender: number | undefined;
    for (let i = 0; i < 200 && sender === undefined; i++) {
      await new Promise((r) => setTimeout(r, 25));
      sender = childOf(controller.pid!)[0];
    }
    expect(sender).toBeDefined();
    controller.kill('SIGKILL');
    const alive = (pid: number) => {
      try {
        return !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, 'utf8'));
      } catch {
        return false;
      }
    };
    for (let i = 0; i < 200 && alive(sender!); i++) await new Promise((r) => setTimeout(r, 25));
    expect(alive(sender!)).toBe(false);
  });
});
