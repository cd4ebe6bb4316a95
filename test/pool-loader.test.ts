/**
 * The pool loader (controller/engine/pool-loader.ts) against a stand-in for
 * the shim's session: what its copies name in staging is the image's data,
 * also when the application has no room for the staging's fds and the
 * loader loads the shim's own staging instead, after its workers have
 * ended (they end once every frame is loaded).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pseudoRandom } from './helpers/pseudo-random.js';

const dist = (m: string) => import(new URL(`../dist/controller/${m}.js`, import.meta.url).href);
const { PoolLoader } = await dist('engine/pool-loader');
const { createStaging } = await dist('engine/staging-files');
const { ImageReader, ImageWriter, compressFrame } = await dist('image/index');
const { GpuckptError } = await dist('base/errors');

const root = mkdtempSync(join(tmpdir(), 'gpuckpt-pool-loader-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const GiB = 1024n * 1024n * 1024n;
const BASE = 0x600000000000n;
const FRAME = 256 * 1024;


/** An image of two allocations on device 0; the data each address holds. */
async function makeImage(path: string): Promise<Map<bigint, Buffer>> {
  const allocs = [
    { device: 0, addr: BASE, size: 1_000_000n },
    { device: 0, addr: BASE + 2n * GiB, size: 300_000n },
  ];
  const writer = await ImageWriter.create(path);
  const frames = [];
  const data = new Map<bigint, Buffer>();
  for (const [i, a] of allocs.entries()) {
    const all = pseudoRandom(Number(a.size), i + 7);
    for (let at = 0; at < all.length; at += FRAME) {
      const piece = all.subarray(at, Math.min(at + FRAME, all.length));
      const compressed = compressFrame(piece);
      const offset = await writer.appendFrame(compressed);
      const addr = a.addr + BigInt(at);
      frames.push({ device: 0, addr, length: piece.length, offset, compressedLength: compressed.length });
      data.set(addr, Buffer.from(piece));
    }
  }
  await writer.commit({
    format: 'gpuckpt-image',
    version: 1,
    protocolVersion: 3,
    kind: 'gpu-only',
    createdAt: '2026-11-27T12:00:00.000Z',
    source: { pid: 4242, command: ['python', 'train.py'], host: 'node17', uid: 1000 },
    pool: { base: BASE, sliceSize: 64n * GiB, deviceCount: 1, quantum: 2n * 1024n * 1024n },
    devices: [{ ordinal: 0, name: 'NVIDIA H100 80GB HBM3', uuid: 'GPU-00000000-aaaa-bbbb-cccc-dddddddddddd', totalMemory: 85_032_189_952n }],
    allocations: allocs,
    outsidePool: { managed: 0n, streamOrdered: 0n, host: 0n, unrouted: 0n },
    data: { file: 'pool.zst', frames, rawBytes: frames.reduce((s, f) => s + BigInt(f.length), 0n), storedBytes: writer.storedBytes },
    stats: { saveMs: 1, frames: frames.length },
  });
  return data;
}

interface Range {
  device: number;
  addr: bigint;
  length: number;
  stagingOffset: number;
}

/**
 * Stands in for the shim: refuses the staging's fds once the loader has
 * loaded it and had time to end its workers (as an application at its fd
 * limit does), makes staging of its own, and records the copies.
 */
function shimWithoutFds(loaded: () => Promise<void>) {
  const copies: Range[] = [];
  let theirs: { fds: number[]; fileBytes: number; size: number } | undefined;
  return {
    copies,
    staging: () => theirs!,
    session: {
      pid: 4242,
      async giveStaging(): Promise<void> {
        await loaded();
        await new Promise((r) => setTimeout(r, 300));
        throw new GpuckptError('OUT_OF_FDS', 'process 4242 has no room for the staging memfds');
      },
      async mapStaging(size: number) {
        theirs = createStaging(size);
        return theirs;
      },
      async fillZeros(): Promise<void> {},
      async copyIn(ranges: Range[]): Promise<void> {
        copies.push(...ranges);
      },
    },
  };
}

/** Bytes [offset, offset+length) of staging, read through its memfds. */
function readStaging(staging: { fds: number[]; fileBytes: number }, offset: number, length: number): Buffer {
  const out = Buffer.alloc(length);
  for (let done = 0; done < length; ) {
    const at = offset + done;
    const file = Math.floor(at / staging.fileBytes);
    const n = readSync(staging.fds[file]!, out, done, Math.min(length - done, staging.fileBytes - (at % staging.fileBytes)), at % staging.fileBytes);
    if (n <= 0) throw new Error(`staging ends at ${at}`);
    done += n;
  }
  return out;
}

describe('pool loader', () => {
  it("loads the shim's own staging again, with as many workers, when the application has no room for the fds after the loading ended its workers", async () => {
    const path = join(root, 'img');
    const data = await makeImage(path);
    const reader = await ImageReader.open(path);
    let loader: InstanceType<typeof PoolLoader> | undefined;
    const shim = shimWithoutFds(() => loader!.whenReady());
    try {
      loader = await PoolLoader.open(reader, { workers: 2 });
      expect(loader.fits).toBe(true);
      await loader.attach(shim.session);
      await loader.copyIn(shim.session);
      expect(shim.copies.length).toBe(data.size);
      for (const c of shim.copies) expect(readStaging(shim.staging(), c.stagingOffset, c.length).equals(data.get(c.addr)!)).toBe(true);
    } finally {
      await loader?.close();
      await reader.close();
    }
  }, 20_000); // a pool of no workers never answers: the loader hangs
});
