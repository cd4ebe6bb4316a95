/**
 * The on-disk image format: manifest encoding, frame codec, atomic writer,
 * and a reader that refuses every kind of damage with its own error code.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { chmod, lstat, mkdir, mkdtemp, open, readFile, readdir, rm, stat, symlink, truncate, writeFile, type FileHandle } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { compress as zstdCompress } from 'zstd-napi';
import { GpuckptError, type ErrorCode } from '../controller/base/errors.js';
import {
  DATA_FILE,
  FORMAT_VERSION,
  ImageReader,
  ImageWriter,
  MANIFEST_FILE,
  checkManifest,
  compressFrame,
  decodeManifest,
  decompressFrame,
  encodeManifest,
  publishedPath,
  removeStaleTempDirs,
  tempDirOwner,
  type AllocationRecord,
  type FrameRecord,
  type Manifest,
} from '../controller/image/index.js';
import { writerTestHooks } from '../controller/image/writer.js';
import { syncTree } from '../controller/image/durable.js';
import { native } from '../native/index.js';
import { encodeBySpec } from './helpers/manifest-bytes.js';
import { pseudoRandom } from './helpers/pseudo-random.js';

const KiB = 1024n;
const MiB = 1024n * KiB;
const GiB = 1024n * MiB;
const BASE = 0x600000000000n;
const SLICE = 64n * GiB;
const FRAME = 64 * 1024;

// ------------------------------------------------------------------ helpers

let root: string;
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'gpuckpt-image-test-'));
});
afterEach(async () => {
  delete writerTestHooks.openFile;
  delete writerTestHooks.startWriteback;
  await rm(root, { recursive: true, force: true });
});

function baseManifest(allocations: AllocationRecord[], frames: FrameRecord[], storedBytes: bigint, deviceCount = 2): Manifest {
  return {
    format: 'gpuckpt-image',
    version: 1,
    protocolVersion: 3,
    kind: 'gpu-only',
    createdAt: '2024-05-01T12:00:00.000Z',
    source: { pid: 4242, command: ['python', 'train.py', '--epochs', '3'], host: 'node17', uid: 1000 },
    pool: { base: BASE, sliceSize: SLICE, deviceCount, quantum: 2n * MiB },
    devices: Array.from({ length: deviceCount }, (_, i) => ({
      ordinal: i,
      name: 'NVIDIA H100 80GB HBM3',
      uuid: `GPU-0000000${i}-aaaa-bbbb-cccc-dddddddddddd`,
      totalMemory: 85_032_189_952n,
    })),
    allocations,
    outsidePool: { managed: 0n, streamOrdered: 4n * MiB, host: 0x7fff_ffff_ffff_ffffn, unrouted: 0n },
    data: {
      file: 'pool.zst',
      frames,
      rawBytes: frames.reduce((s, f) => s + BigInt(f.length), 0n),
      storedBytes,
    },
    stats: { saveMs: 12.5, frames: frames.length },
  };
}

/** Split allocations into frames with made-up compressed lengths, stored back to back. */
function framesFor(allocations: AllocationRecord[], compressedLength = 100): { frames: FrameRecord[]; storedBytes: bigint } {
  const frames: FrameRecord[] = [];
  let offset = 0n;
  for (const a of allocations) {
    for (let at = 0n; at < a.size; at += BigInt(FRAME)) {
      const length = Number(a.size - at < BigInt(FRAME) ? a.size - at : BigInt(FRAME));
      frames.push({ device: a.device, addr: a.addr + at, length, offset, compressedLength });
      offset += BigInt(compressedLength);
    }
  }
  return { frames, storedBytes: offset };
}

const SAMPLE_ALLOCS: AllocationRecord[] = [
  { device: 0, addr: BASE, size: 200_000n },
  { device: 0, addr: BASE + 63n * GiB, size: 128n * KiB },
  { device: 1, addr: BASE + SLICE + 2n * MiB, size: 70_000n },
];

/** A fresh copy each time: tests mutate what they get. */
function sampleManifest(): Manifest {
  const allocs = structuredClone(SAMPLE_ALLOCS);
  const { frames, storedBytes } = framesFor(allocs);
  return baseManifest(allocs, frames, storedBytes);
}

function codeOf(f: () => unknown): ErrorCode | 'no error' | 'not a GpuckptError' {
  try {
    f();
    return 'no error';
  } catch (e) {
    return e instanceof GpuckptError ? e.code : 'not a GpuckptError';
  }
}

async function rejection(p: Promise<unknown>): Promise<GpuckptError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof GpuckptError) return e;
    throw e;
  }
  throw new Error('expected a rejection');
}

interface BuiltImage {
  path: string;
  manifest: Manifest;
  /** Raw bytes of each frame, in manifest order. */
  raw: Buffer[];
}

/** Contents of SAMPLE_ALLOCS: random, all zeros, half zeros half random. */
function sampleContents(): Buffer[] {
  return [
    pseudoRandom(200_000, 1),
    Buffer.alloc(128 * 1024),
    Buffer.concat([Buffer.alloc(35_000), pseudoRandom(35_000, 2)]),
  ];
}

async function buildImage(path: string, contents = sampleContents(), opts?: { force?: boolean }): Promise<BuiltImage> {
  const writer = await ImageWriter.create(path, opts);
  const frames: FrameRecord[] = [];
  const raw: Buffer[] = [];
  for (const [i, a] of SAMPLE_ALLOCS.entries()) {
    const bytes = contents[i]!;
    for (let at = 0; at < bytes.length; at += FRAME) {
      const piece = bytes.subarray(at, Math.min(at + FRAME, bytes.length));
      const compressed = compressFrame(piece);
      const offset = await writer.appendFrame(compressed);
      frames.push({ device: a.device, addr: a.addr + BigInt(at), length: piece.length, offset, compressedLength: compressed.length });
      raw.push(Buffer.from(piece));
    }
  }
  const manifest = baseManifest(structuredClone(SAMPLE_ALLOCS), frames, writer.storedBytes);
  await writer.commit(manifest);
  return { path, manifest, raw };
}

async function openCode(path: string): Promise<ErrorCode | 'opened'> {
  try {
    const r = await ImageReader.open(path);
    await r.close();
    return 'opened';
  } catch (e) {
    if (e instanceof GpuckptError) return e.code;
    throw e;
  }
}

async function flipByte(file: string, position: number): Promise<void> {
  const fh = await open(file, 'r+');
  try {
    const b = Buffer.alloc(1);
    await fh.read(b, 0, 1, position);
    b[0] ^= 0x5a;
    await fh.write(b, 0, 1, position);
  } finally {
    await fh.close();
  }
}

async function rewriteManifest(imagePath: string, mutate: (m: Manifest) => void): Promise<void> {
  const file = join(imagePath, MANIFEST_FILE);
  const m = structuredClone(decodeManifest(await readFile(file), file));
  mutate(m);
  await writeFile(file, encodeBySpec(m));
}

// ------------------------------------------------------------------ manifest

describe('manifest encoding', () => {
  it('round-trips several devices and allocations with exact 64-bit values', () => {
    const m = sampleManifest();
    m.devices[1]!.totalMemory = 0x7fff_ffff_ffff_ffffn;
    m.outsidePool.managed = 0xffff_ffff_ffff_ffffn;
    const back = decodeManifest(encodeManifest(m), '/x/manifest');
    expect(back).toEqual(m);
    expect(back.allocations[1]!.addr).toBe(0x600000000000n + 63n * GiB);
    expect(back.devices[1]!.totalMemory).toBe(0x7fff_ffff_ffff_ffffn);
    expect(back.outsidePool.host).toBe(0x7fff_ffff_ffff_ffffn);
    expect(back.outsidePool.managed).toBe(0xffff_ffff_ffff_ffffn);
    expect(back.pool.base).toBe(0x600000000000n);
    expect(typeof back.data.frames[0]!.offset).toBe('bigint');
    expect(typeof back.data.frames[0]!.length).toBe('number');
  });

  it('lays out the header as specified: magic, u32 LE version, u32 LE length, SHA-256', () => {
    const bytes = encodeManifest(sampleManifest());
    expect(bytes.subarray(0, 8).toString('latin1')).toBe('GPUCKPT\0');
    expect(bytes.readUInt32LE(8)).toBe(FORMAT_VERSION);
    expect(bytes.readUInt32LE(12)).toBe(bytes.length - 48);
    expect(bytes.subarray(16, 48)).toEqual(createHash('sha256').update(bytes.subarray(48)).digest());
    // And a file built from the spec alone reads back the same.
    expect(decodeManifest(encodeBySpec(sampleManifest()), 'spec')).toEqual(sampleManifest());
  });

  it('round-trips a manifest without stats and with no allocations', () => {
    const m = baseManifest([], [], 0n, 1);
    delete m.stats;
    const back = decodeManifest(encodeManifest(m), 'm');
    expect(back).toEqual(m);
    expect('stats' in back).toBe(false);
  });

  it('ignores unknown keys (informational additions need no format bump)', () => {
    const back = decodeManifest(encodeBySpec({ ...sampleManifest(), futureNote: 'hello' }), 'm');
    expect(back).toEqual(sampleManifest());
  });

  it('carries byte planes per frame (format 3), and refuses other sizes or planes in an older version', () => {
    const m = sampleManifest();
    m.version = FORMAT_VERSION;
    m.data.frames[0]!.planes = 4;
    m.data.frames[1]!.planes = 2;
    expect(decodeManifest(encodeManifest(m), 'm')).toEqual(m);
    const three = structuredClone(m) as unknown as { data: { frames: { planes: number }[] } };
    three.data.frames[0]!.planes = 3;
    expect(() => decodeManifest(encodeBySpec(three), 'm')).toThrow(/data\.frames\[0\]\.planes is 3: 2 or 4, from format version 3/);
    expect(() => decodeManifest(encodeBySpec({ ...m, version: 2 }), 'm')).toThrow(/planes is 4: 2 or 4, from format version 3/);
  });

  it('bounds a frame of planes by a zstd frame per plane from format 5, by one before', () => {
    const m = sampleManifest();
    const f = m.data.frames[0]!;
    f.planes = 4;
    const n = f.length;
    // ZSTD_COMPRESSBOUND of the frame as one zstd frame, and of it as four, each a quarter.
    const bound = (k: number) => k + (k >>> 8) + (k < 131072 ? (131072 - k) >>> 11 : 0);
    const stored = (length: number) => {
      const grow = length - f.compressedLength;
      f.compressedLength = length;
      for (const g of m.data.frames.slice(1)) g.offset += BigInt(grow);
      m.data.storedBytes += BigInt(grow);
    };
    stored(bound(n) + 1);
    m.version = FORMAT_VERSION;
    expect(decodeManifest(encodeBySpec(m), 'm').data.frames[0]!.compressedLength).toBe(bound(n) + 1);
    expect(() => decodeManifest(encodeBySpec({ ...m, version: 4 }), 'm')).toThrow(`data.frames[0].compressedLength is ${bound(n) + 1}, expected 1..${bound(n)}`);
    stored(4 * bound(n / 4) + 1);
    expect(() => decodeManifest(encodeBySpec(m), 'm')).toThrow(`data.frames[0].compressedLength is ${4 * bound(n / 4) + 1}, expected 1..${4 * bound(n / 4)}`);
  });

  it('refuses to encode an invalid manifest (a caller bug)', () => {
    const m = sampleManifest();
    m.allocations[0]!.addr = BASE - 1n;
    expect(codeOf(() => encodeManifest(m))).toBe('INTERNAL');
  });

  /** Drops allocation ai's frames, the others packed again from offset 0. */
  const withoutFramesOf = (m: Manifest, ai: number): Manifest => {
    const a = m.allocations[ai]!;
    m.data.frames = m.data.frames.filter((f) => !(f.device === a.device && f.addr >= a.addr && f.addr < a.addr + a.size));
    let offset = 0n;
    for (const f of m.data.frames) {
      f.offset = offset;
      offset += BigInt(f.compressedLength);
    }
    m.data.storedBytes = offset;
    m.data.rawBytes = m.data.frames.reduce((n, f) => n + BigInt(f.length), 0n);
    return m;
  };

  describe('all-zero blocks (format 2): an allocation may lack frames only where its digests say zeros', () => {
    /** Digests of 4 KiB blocks: allocation zero (all zeros in sampleContents) 0, the others not. */
    const withDigests = (m: Manifest, zero: number): Manifest => {
      m.blocks = { size: 4096, digests: m.allocations.map((a, i) => Buffer.alloc(8 * Math.ceil(Number(a.size) / 4096), i === zero ? 0 : 1)) };
      return m;
    };
    it('a gap of all-zero blocks is zeros', () => {
      const m = withoutFramesOf(withDigests(sampleManifest(), 1), 1);
      expect(checkManifest(m).ok).toBe(true);
      expect(decodeManifest(encodeBySpec(m), 'm').data.frames).toHaveLength(m.data.frames.length);
    });
    it('a gap where a block is not all zeros is missing data', () => {
      const m = withoutFramesOf(withDigests(sampleManifest(), 0), 1);
      expect(checkManifest(m)).toMatchObject({ ok: false, problem: expect.stringMatching(/allocation 1 .* has no data for/) });
    });
    it('without digests, any gap is missing data', () => {
      expect(checkManifest(withoutFramesOf(sampleManifest(), 1)).ok).toBe(false);
    });
  });

  describe('unused ranges (format 4): a gap the framework held unused needs no data', () => {
    const unusedAll = (m: Manifest, ai: number): Manifest => {
      const a = m.allocations[ai]!;
      m.version = FORMAT_VERSION;
      m.unused = [{ device: a.device, addr: a.addr, size: a.size }];
      return m;
    };
    it('an allocation wholly unused has no frame, and round-trips', () => {
      const m = unusedAll(withoutFramesOf(sampleManifest(), 1), 1);
      expect(checkManifest(m).ok).toBe(true);
      expect(decodeManifest(encodeManifest(m), 'm').unused).toEqual(m.unused);
    });
    it('a gap only partly unused is missing data', () => {
      const m = unusedAll(withoutFramesOf(sampleManifest(), 1), 1);
      m.unused![0]!.size -= 4096n;
      expect(checkManifest(m)).toMatchObject({ ok: false, problem: expect.stringMatching(/allocation 1 .* has no data for/) });
    });
    it('refuses a range outside one allocation, ranges out of order, and unused ranges before format 4', () => {
      const outside = unusedAll(sampleManifest(), 1);
      outside.unused![0]!.size += 1n;
      expect(checkManifest(outside)).toMatchObject({ ok: false, problem: expect.stringMatching(/unused\[0\] .* is not inside one allocation/) });
      const twice = unusedAll(sampleManifest(), 1);
      twice.unused!.push({ ...twice.unused![0]! });
      expect(checkManifest(twice)).toMatchObject({ ok: false, problem: expect.stringMatching(/unused\[1\] .* overlaps or precedes/) });
      const old = unusedAll(sampleManifest(), 1);
      old.version = 3;
      expect(checkManifest(old)).toMatchObject({ ok: false, problem: expect.stringMatching(/unused ranges come from format version 4/) });
    });
  });

  describe('validation: each problem is IMAGE_CORRUPT with a message saying what is wrong', () => {
    const cases: [string, (m: Manifest) => void, RegExp][] = [
      ['number instead of bigint', (m) => ((m.allocations[0] as { addr: unknown }).addr = 1234), /allocations\[0\]\.addr .*expected a 64-bit integer/],
      ['negative size', (m) => (m.allocations[0]!.size = -1n), /allocations\[0\]\.size/],
      ['bigint instead of number', (m) => ((m.data.frames[0] as { length: unknown }).length = 65536n), /frames\[0\]\.length .*expected an integer/],
      ['missing field', (m) => delete (m.source as { host?: string }).host, /source\.host is undefined/],
      ['wrong format', (m) => ((m as { format: string }).format = 'other'), /format/],
      ['wrong kind', (m) => ((m as { kind: string }).kind = 'full'), /kind/],
      ['payload version unknown', (m) => ((m as { version: number }).version = FORMAT_VERSION + 1), /payload version/],
      ['bad date', (m) => (m.createdAt = 'yesterday'), /createdAt/],
      ['command not strings', (m) => ((m.source.command as unknown[])[1] = 7), /source\.command\[1\]/],
      ['stats not numbers', (m) => ((m.stats as Record<string, unknown>).saveMs = 'fast'), /stats\.saveMs/],
      ['device count mismatch', (m) => m.devices.pop(), /devices listed/],
      ['duplicate ordinal', (m) => (m.devices[1]!.ordinal = 0), /listed twice/],
      ['allocation on unknown device', (m) => (m.allocations[2]!.device = 2), /allocations\[2\]\.device/],
      [
        'allocation outside its slice',
        (m) => {
          // Move allocation 2 (device 1) to device 0's addresses, frames included.
          m.allocations[2]!.device = 0;
          for (const f of m.data.frames) if (f.device === 1) f.device = 0;
          m.allocations[2]!.addr = BASE + SLICE - 10n;
        },
        /allocation 2 .*outside the device's pool slice/,
      ],
      [
        'overlapping allocations',
        (m) => {
          m.allocations.push({ device: 0, addr: BASE + 100_000n, size: 4096n });
        },
        /allocations 0 .* and 3 .* overlap/,
      ],
      ['frame outside its allocation', (m) => (m.data.frames[0]!.addr = BASE + 62n * GiB), /frame 0 .* is not inside an allocation/],
      ['frame crossing its allocation end', (m) => (m.data.frames[3]!.addr += 1n), /frame 3 .* is not inside an allocation/],
      ['frame on the wrong device', (m) => (m.data.frames[0]!.device = 1), /frame 0 .*(outside the device's pool slice|not inside)/],
      [
        'gap in an allocation',
        (m) => {
          m.data.frames[1]!.length -= 1;
          m.data.rawBytes -= 1n;
        },
        /allocation 0 .* has no data for/,
      ],
      [
        'overlapping frames',
        (m) => {
          const f = m.data.frames[1]!;
          m.data.frames.push({ ...f, offset: m.data.storedBytes });
          m.data.storedBytes += BigInt(f.compressedLength);
          m.data.rawBytes += BigInt(f.length);
        },
        /overlaps another frame/,
      ],
      ['frame past the end of pool.zst', (m) => (m.data.frames[7]!.offset += 1000n), /extends past the end of pool\.zst/],
      ['frames sharing pool.zst bytes', (m) => (m.data.frames[1]!.offset = 0n), /shares bytes of pool\.zst/],
      ['unreferenced pool.zst bytes', (m) => (m.data.storedBytes += 5n), /belong to no frame/],
      ['wrong rawBytes', (m) => (m.data.rawBytes += 1n), /rawBytes/],
      ['compressed length beyond any zstd bound', (m) => (m.data.frames[0]!.compressedLength = 10_000_000), /compressedLength/],
      ['pool beyond 64-bit addresses', (m) => (m.pool.base = 0xffff_ffff_0000_0000n), /does not fit/],
      ['data file name', (m) => ((m.data as { file: string }).file = 'other.zst'), /data\.file/],
    ];
    for (const [name, mutate, message] of cases) {
      it(name, () => {
        const m = structuredClone(sampleManifest());
        mutate(m);
        expect(checkManifest(m).ok).toBe(false);
        let err: unknown;
        try {
          decodeManifest(encodeBySpec(m), '/img/manifest');
        } catch (e) {
          err = e;
        }
        expect(err).toBeInstanceOf(GpuckptError);
        expect((err as GpuckptError).code).toBe('IMAGE_CORRUPT');
        expect((err as GpuckptError).message).toMatch(/^image manifest \/img\/manifest is corrupt: /);
        expect((err as GpuckptError).message).toMatch(message);
      });
    }
  });

  it('refuses a payload that is not a msgpack map', () => {
    expect(codeOf(() => decodeManifest(encodeBySpec([1, 2, 3]), 'm'))).toBe('IMAGE_CORRUPT');
    expect(codeOf(() => decodeManifest(encodeBySpec('hello'), 'm'))).toBe('IMAGE_CORRUPT');
  });
});

// ------------------------------------------------------------------ frame codec

describe('frame codec', () => {
  it('round-trips and always sets the zstd content-checksum flag', () => {
    for (const raw of [pseudoRandom(100_000, 9), Buffer.alloc(FRAME), Buffer.from('x')]) {
      const c = compressFrame(raw);
      expect(c[4]! & 0x04).toBe(0x04);
      expect(decompressFrame(c, raw.length, 'f').equals(raw)).toBe(true);
      const c9 = compressFrame(raw, 9);
      expect(c9[4]! & 0x04).toBe(0x04);
      expect(decompressFrame(c9, raw.length, 'f').equals(raw)).toBe(true);
    }
  });

  it('decompresses into a destination of exactly the frame\'s length, and refuses any other', () => {
    const raw = pseudoRandom(100_000, 5);
    const c = compressFrame(raw);
    const place = new Uint8Array(raw.length + 20).fill(0xee);
    const into = place.subarray(10, 10 + raw.length);
    expect(decompressFrame(c, raw.length, 'f', into)).toBe(into);
    expect(Buffer.from(into).equals(raw)).toBe(true);
    expect(place[9]).toBe(0xee); // nothing written outside it
    expect(place[10 + raw.length]).toBe(0xee);
    expect(codeOf(() => decompressFrame(c, raw.length, 'f', place))).toBe('INTERNAL');
    const damaged = Buffer.from(c);
    damaged[damaged.length - 1]! ^= 0x01;
    expect(codeOf(() => decompressFrame(damaged, raw.length, 'f', into))).toBe('IMAGE_DATA_CORRUPT');
  });

  it('reports every kind of damage as IMAGE_DATA_CORRUPT', () => {
    const raw = pseudoRandom(50_000, 3);
    const good = compressFrame(raw);
    const flipped = (i: number): Buffer => {
      const b = Buffer.from(good);
      b[i]! ^= 0x01;
      return b;
    };
    expect(codeOf(() => decompressFrame(flipped(good.length >> 1), raw.length, 'f'))).toBe('IMAGE_DATA_CORRUPT');
    expect(codeOf(() => decompressFrame(flipped(good.length - 1), raw.length, 'f'))).toBe('IMAGE_DATA_CORRUPT'); // checksum
    expect(codeOf(() => decompressFrame(flipped(0), raw.length, 'f'))).toBe('IMAGE_DATA_CORRUPT'); // magic
    expect(codeOf(() => decompressFrame(good.subarray(0, good.length - 1), raw.length, 'f'))).toBe('IMAGE_DATA_CORRUPT');
    expect(codeOf(() => decompressFrame(Buffer.concat([good, good]), raw.length, 'f'))).toBe('IMAGE_DATA_CORRUPT');
    expect(codeOf(() => decompressFrame(good, raw.length + 1, 'f'))).toBe('IMAGE_DATA_CORRUPT');
    expect(codeOf(() => decompressFrame(Buffer.from('not zstd at all'), 5, 'f'))).toBe('IMAGE_DATA_CORRUPT');
    expect(codeOf(() => decompressFrame(Buffer.alloc(0), 5, 'f'))).toBe('IMAGE_DATA_CORRUPT');
    // A frame without a checksum would hide damage: refused even when intact.
    const unchecked = zstdCompress(raw, { checksumFlag: false });
    expect(codeOf(() => decompressFrame(unchecked, raw.length, 'f'))).toBe('IMAGE_DATA_CORRUPT');
    try {
      decompressFrame(flipped(good.length - 1), raw.length, 'frame 7 (device 1, address 0x1000)');
    } catch (e) {
      expect((e as Error).message).toMatch(/frame 7 \(device 1, address 0x1000\)/);
    }
  });

  it('works inside worker threads, several at once', async () => {
    // Workers cannot load .ts under Node 20: transpile the codec (and the
    // modules it imports) to CommonJS with the project's TypeScript.
    const require = createRequire(import.meta.url);
    const ts = (await import('typescript')).default;
    const dir = join(root, 'worker');
    await mkdir(dir);
    const toCjs = (file: string): string =>
      ts.transpileModule(readFileSync(new URL(file, import.meta.url), 'utf8'), {
        compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022, esModuleInterop: true },
      }).outputText;
    await writeFile(join(dir, 'errors.cjs'), toCjs('../controller/base/errors.ts'));
    await writeFile(join(dir, 'format.cjs'), toCjs('../controller/image/format.ts'));
    // The addon itself, as native/index.ts loads it (stored planes).
    const addon = fileURLToPath(new URL('../native/build/Release/gpuckpt_native.node', import.meta.url));
    await writeFile(join(dir, 'native.cjs'), `exports.native = () => require(${JSON.stringify(addon)});`);
    await writeFile(
      join(dir, 'codec.cjs'),
      toCjs('../controller/image/frame-codec.ts')
        .replaceAll('import.meta.url', '__filename') // its lazy require, in CommonJS
        .replaceAll(/["']zstd-napi\/binding\.js["']/g, JSON.stringify(require.resolve('zstd-napi/binding.js')))
        .replaceAll('"zstd-napi"', JSON.stringify(require.resolve('zstd-napi')))
        .replaceAll('"../base/errors.js"', '"./errors.cjs"')
        .replaceAll('"../../native/index.js"', '"./native.cjs"')
        .replaceAll('"./format.js"', '"./format.cjs"'),
    );
    const workerCode = `
      const { parentPort, workerData } = require('node:worker_threads');
      const { compressFrame, decompressFrame } = require(workerData.codec);
      const raw = Buffer.alloc(200000);
      for (let i = 0; i < raw.length; i++) raw[i] = (i * 7 + workerData.seed) & 0xff;
      let ok = 0;
      for (let round = 0; round < 20; round++) {
        const c = compressFrame(raw, 1 + (round % 3));
        if (decompressFrame(c, raw.length, 'w').equals(raw)) ok++;
      }
      const bad = Buffer.from(compressFrame(raw));
      bad[bad.length >> 1] ^= 0xff;
      let code = 'none';
      try { decompressFrame(bad, raw.length, 'w'); } catch (e) { code = e.code; }
      parentPort.postMessage({ ok, code });
    `;
    const results = await Promise.all(
      [1, 2, 3].map(
        (seed) =>
          new Promise<{ ok: number; code: string }>((resolvePromise, reject) => {
            const w = new Worker(workerCode, { eval: true, workerData: { codec: join(dir, 'codec.cjs'), seed } });
            w.once('message', resolvePromise);
            w.once('error', reject);
          }),
      ),
    );
    expect(results).toEqual([1, 2, 3].map(() => ({ ok: 20, code: 'IMAGE_DATA_CORRUPT' })));
  });
});

// ------------------------------------------------------------------ writer + reader

describe('writer and reader', () => {
  it('round-trips random and zero frames bit for bit', async () => {
    const path = join(root, 'img');
    const contents = sampleContents();
    const built = await buildImage(path, contents);
    const reader = await ImageReader.open(path);
    try {
      expect(reader.manifest).toEqual(built.manifest);
      expect(reader.frameCount).toBe(4 + 2 + 2);
      const progress: number[] = [];
      const result = await reader.verify((p) => progress.push(p.framesDone));
      expect(result).toEqual({ frames: 8, rawBytes: BigInt(200_000 + 128 * 1024 + 70_000), ok: true });
      expect(progress).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
      // Reassemble each allocation from its frames.
      for (const [ai, a] of SAMPLE_ALLOCS.entries()) {
        const out = Buffer.alloc(Number(a.size));
        for (const [i, f] of reader.manifest.data.frames.entries()) {
          if (f.device !== a.device || f.addr < a.addr || f.addr >= a.addr + a.size) continue;
          (await reader.readFrameData(i)).copy(out, Number(f.addr - a.addr));
        }
        expect(out.equals(contents[ai]!)).toBe(true);
      }
      // Zero frames compress to almost nothing; the compressed bytes are what was appended.
      expect(reader.manifest.data.frames[4]!.compressedLength).toBeLessThan(100);
      const stored = await readFile(join(path, DATA_FILE));
      const f0 = reader.manifest.data.frames[0]!;
      expect((await reader.readFrame(0)).equals(stored.subarray(0, f0.compressedLength))).toBe(true);
    } finally {
      await reader.close();
    }
  });

  it('writes files 0600 in a directory 0700, hidden until commit', async () => {
    const path = join(root, 'img');
    const writer = await ImageWriter.create(path);
    await writer.appendFrame(compressFrame(Buffer.alloc(10)));
    await expect(lstat(path)).rejects.toThrow(/ENOENT/);
    const hidden = await readdir(root);
    expect(hidden).toHaveLength(1);
    expect(hidden[0]).toMatch(new RegExp(`^\\.img\\.gpuckpt-tmp-${process.pid}-[0-9a-f]+$`));
    expect((await stat(join(root, hidden[0]!))).mode & 0o777).toBe(0o700);
    await writer.abort();

    await buildImage(path);
    expect((await stat(path)).mode & 0o777).toBe(0o700);
    expect((await stat(join(path, MANIFEST_FILE))).mode & 0o777).toBe(0o600);
    expect((await stat(join(path, DATA_FILE))).mode & 0o777).toBe(0o600);
    expect((await readdir(path)).sort()).toEqual([MANIFEST_FILE, DATA_FILE].sort());
    expect(await readdir(root)).toEqual(['img']);
  });

  it('assigns offsets in call order when appends overlap', async () => {
    const path = join(root, 'img');
    const writer = await ImageWriter.create(path);
    const pieces = [pseudoRandom(1000, 5), pseudoRandom(3000, 6), pseudoRandom(20, 7)];
    const offsets = await Promise.all(pieces.map((p) => writer.appendFrame(p)));
    expect(offsets).toEqual([0n, 1000n, 4000n]);
    await writer.abort();
  });
});

// ------------------------------------------------------------------ writer failures

describe('writer', () => {
  it('refuses an existing path with IMAGE_EXISTS', async () => {
    const path = join(root, 'img');
    await buildImage(path);
    expect((await rejection(ImageWriter.create(path))).code).toBe('IMAGE_EXISTS');
    await writeFile(join(root, 'file'), 'x');
    expect((await rejection(ImageWriter.create(join(root, 'file')))).code).toBe('IMAGE_EXISTS');
  });

  it('IMAGE_EXISTS at commit if the path appeared meanwhile, leaving the other thing alone', async () => {
    const path = join(root, 'img');
    const writer = await ImageWriter.create(path);
    await mkdir(path);
    await writeFile(join(path, 'theirs'), 'keep');
    const { frames, storedBytes } = framesFor([]);
    expect((await rejection(writer.commit(baseManifest([], frames, storedBytes, 1)))).code).toBe('IMAGE_EXISTS');
    expect(await readdir(path)).toEqual(['theirs']);
    expect(await readdir(root)).toEqual(['img']);
  });

  it('replaces an existing image with force, leaving nothing else behind', async () => {
    const path = join(root, 'img');
    await buildImage(path, [pseudoRandom(200_000, 11), Buffer.alloc(128 * 1024), Buffer.alloc(70_000)]);
    const second = sampleContents();
    await buildImage(path, second, { force: true });
    expect(await readdir(root)).toEqual(['img']);
    const reader = await ImageReader.open(path);
    try {
      await reader.verify();
      expect((await reader.readFrameData(0)).equals(second[0]!.subarray(0, FRAME))).toBe(true);
    } finally {
      await reader.close();
    }
  });

  it('even with force, refuses to replace something that is not an image', async () => {
    const path = join(root, 'precious');
    await mkdir(path);
    await writeFile(join(path, 'thesis.tex'), 'years of work');
    expect((await rejection(ImageWriter.create(path, { force: true }))).code).toBe('IMAGE_EXISTS');
    expect(await readdir(path)).toEqual(['thesis.tex']);
    // An empty directory (e.g. made by a script) may be replaced.
    await mkdir(join(root, 'empty'));
    await buildImage(join(root, 'empty'), undefined, { force: true });
    expect((await readdir(join(root, 'empty'))).sort()).toEqual([MANIFEST_FILE, DATA_FILE].sort());
  });

  it('abort leaves no image and no working directory; abort after commit does nothing', async () => {
    const path = join(root, 'img');
    const writer = await ImageWriter.create(path);
    await writer.appendFrame(compressFrame(pseudoRandom(5000, 1)));
    await writer.abort();
    await writer.abort();
    expect(await readdir(root)).toEqual([]);
    expect((await rejection(writer.appendFrame(Buffer.alloc(1)))).code).toBe('INTERNAL');

    const w2 = await ImageWriter.create(path);
    await w2.commit(baseManifest([], [], 0n, 1));
    await w2.abort();
    expect(await openCode(path)).toBe('opened');
  });

  it('a failing data write (ENOSPC from /dev/full) aborts and throws IMAGE_WRITE_FAILED', async () => {
    const path = join(root, 'img');
    writerTestHooks.openFile = (p, role) => (role === 'data' ? open('/dev/full', 'w') : open(p, 'wx', 0o600));
    const writer = await ImageWriter.create(path);
    const err = await rejection(writer.appendFrame(compressFrame(pseudoRandom(5000, 1))));
    expect(err.code).toBe('IMAGE_WRITE_FAILED');
    expect(err.message).toBe(`cannot write image ${path}: no space left on device`);
    expect(await readdir(root)).toEqual([]);
    // The writer stays failed.
    expect((await rejection(writer.commit(baseManifest([], [], 0n, 1)))).code).toBe('IMAGE_WRITE_FAILED');
    expect(await readdir(root)).toEqual([]);
  });

  /** Appends 12 frames of 4000 bytes at once and commits; the image must verify. */
  async function writeTwelveFrames(path: string, flushEveryBytes: number): Promise<void> {
    const writer = await ImageWriter.create(path, { flushEveryBytes });
    const appended = await Promise.all(
      Array.from({ length: 12 }, async (_, i) => {
        const data = compressFrame(pseudoRandom(4000, i + 1));
        const offset = await writer.appendFrame(data);
        return { device: 0, addr: BASE + BigInt(i * 4000), length: 4000, offset, compressedLength: data.length };
      }),
    );
    const frames: FrameRecord[] = appended.sort((a, b) => Number(a.offset - b.offset));
    await writer.commit(baseManifest([{ device: 0, addr: BASE, size: 48_000n }], frames, writer.storedBytes, 1));
    const reader = await ImageReader.open(path);
    try {
      expect(await reader.verify()).toMatchObject({ frames: 12, rawBytes: 48_000n, ok: true });
    } finally {
      await reader.close();
    }
  }

  /** Counts the background flushes of each kind, and how many ran at once. */
  function countFlushes(writeback: (fh: FileHandle) => Promise<void>) {
    const seen = { writebacks: 0, datasyncs: 0, running: 0, most: 0 };
    const oneAtATime = async (run: () => Promise<void>) => {
      seen.most = Math.max(seen.most, ++seen.running);
      try {
        await new Promise((r) => setTimeout(r, 20));
        await run();
      } finally {
        seen.running--;
      }
    };
    writerTestHooks.startWriteback = (fh) => oneAtATime(() => (seen.writebacks++, writeback(fh)));
    writerTestHooks.openFile = async (p, role) => {
      const fh = await open(p, 'wx', 0o600);
      if (role !== 'data') return fh;
      const datasync = fh.datasync.bind(fh);
      fh.datasync = () => oneAtATime(() => (seen.datasyncs++, datasync()));
      return fh;
    };
    return seen;
  }

  it('starts the disk writing appended frames in the background (sync_file_range), one call at a time', async () => {
    const seen = countFlushes((fh) => native().startWriteback(fh.fd));
    await writeTwelveFrames(join(root, 'img'), 10_000);
    expect(seen.writebacks).toBeGreaterThanOrEqual(1);
    expect(seen.datasyncs).toBe(0);
    expect(seen.most).toBe(1);
    expect(seen.running).toBe(0);
  });

  it('the native writeback start works on a real file and names the errno of a bad fd', async () => {
    const fh = await open(join(root, 'f'), 'w');
    try {
      await fh.write(pseudoRandom(100_000, 3));
      await expect(native().startWriteback(fh.fd)).resolves.toBeUndefined();
    } finally {
      await fh.close();
    }
    await expect(native().startWriteback(-1)).rejects.toMatchObject({ code: 'EBADF', syscall: 'sync_file_range' });
  });

  it('where writeback cannot be started (ESPIPE, ENOSYS), flushes with fdatasync instead, one at a time', async () => {
    const refused = () => Promise.reject(Object.assign(new Error('ENOSYS: function not implemented, sync_file_range'), { code: 'ENOSYS' }));
    const seen = countFlushes(refused);
    await writeTwelveFrames(join(root, 'img'), 10_000);
    // Asked once; every later flush went straight to fdatasync.
    expect(seen.writebacks).toBe(1);
    expect(seen.datasyncs).toBeGreaterThanOrEqual(1);
    expect(seen.most).toBe(1);
  });

  for (const failing of ['writeback', 'datasync'] as const) {
    it(`a failing background ${failing} fails the image like a failed write, and leaves nothing`, async () => {
      const path = join(root, 'img');
      const eio = (call: string) => () => Promise.reject(Object.assign(new Error(`EIO: i/o error, ${call}`), { code: 'EIO' }));
      writerTestHooks.startWriteback = failing === 'writeback' ? eio('sync_file_range') : () => Promise.reject(Object.assign(new Error('ESPIPE'), { code: 'ESPIPE' }));
      writerTestHooks.openFile = async (p, role) => {
        const fh = await open(p, 'wx', 0o600);
        if (role === 'data' && failing === 'datasync') fh.datasync = eio('fdatasync');
        return fh;
      };
      const writer = await ImageWriter.create(path, { flushEveryBytes: 1 });
      await writer.appendFrame(compressFrame(pseudoRandom(5000, 1))).catch(() => undefined);
      const err = await rejection(writer.commit(baseManifest([], [], writer.storedBytes, 1)));
      expect(err.code).toBe('IMAGE_WRITE_FAILED');
      expect(err.message).toBe(`cannot write image ${path}: i/o error`);
      expect(await readdir(root)).toEqual([]);
    });
  }

  it('syncTree syncs files in nested directories, never follows a symlink, and reports a missing directory', async () => {
    const dir = join(root, 'criu');
    await mkdir(join(dir, 'nested', 'deeper'), { recursive: true });
    await writeFile(join(dir, 'pages-1.img'), 'x');
    await writeFile(join(dir, 'nested', 'deeper', 'core.img'), 'y');
    await symlink('/nonexistent/target', join(dir, 'dangling'));
    await expect(syncTree(dir)).resolves.toBeUndefined();
    await expect(syncTree(join(root, 'absent'))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('a failing manifest write aborts the commit and leaves nothing', async () => {
    const path = join(root, 'img');
    writerTestHooks.openFile = (p, role) => (role === 'manifest' ? open('/dev/full', 'w') : open(p, 'wx', 0o600));
    const writer = await ImageWriter.create(path);
    const err = await rejection(writer.commit(baseManifest([], [], 0n, 1)));
    expect(err.code).toBe('IMAGE_WRITE_FAILED');
    expect(err.message).toMatch(/no space left on device/);
    expect(await readdir(root)).toEqual([]);
  });

  it('a manifest that does not match the data written is a caller bug (INTERNAL), and leaves nothing', async () => {
    const path = join(root, 'img');
    const writer = await ImageWriter.create(path);
    await writer.appendFrame(compressFrame(Buffer.alloc(10)));
    expect((await rejection(writer.commit(baseManifest([], [], 0n, 1)))).code).toBe('INTERNAL');
    expect(await readdir(root)).toEqual([]);
  });

  it('a missing parent directory is IMAGE_WRITE_FAILED', async () => {
    const err = await rejection(ImageWriter.create(join(root, 'no', 'such', 'img')));
    expect(err.code).toBe('IMAGE_WRITE_FAILED');
    expect(err.message).toMatch(/no such file or directory/);
  });

  it('cleans working directories of dead writers and keeps those of live ones', async () => {
    // No pid above pid_max can exist, so this writer is certainly dead.
    const pidMax = Number(readFileSync('/proc/sys/kernel/pid_max', 'utf8'));
    const dead = pidMax + 1;
    const deadDir = join(root, `.old.gpuckpt-tmp-${dead}-0123abcd`);
    const liveSelf = join(root, `.busy.gpuckpt-tmp-${process.pid}-0123abcd`);
    const liveInit = join(root, `.other.gpuckpt-tmp-1-0123abcd`);
    const deadFile = join(root, `.file.gpuckpt-tmp-${dead}-0123abcd`);
    const unrelated = join(root, `.notes.gpuckpt-tmp-x`);
    for (const d of [deadDir, liveSelf, liveInit, unrelated]) {
      await mkdir(d);
      await writeFile(join(d, DATA_FILE), 'partial');
    }
    await writeFile(deadFile, 'not a directory');
    await symlink(liveSelf, join(root, `.link.gpuckpt-tmp-${dead}-0123abcd`));

    expect(await removeStaleTempDirs(root)).toEqual([deadDir]);
    await rm(liveSelf, { recursive: true });
    await mkdir(deadDir);
    // create() runs the cleanup too.
    const writer = await ImageWriter.create(join(root, 'img'));
    await writer.abort();
    expect((await readdir(root)).sort()).toEqual(
      [`.file.gpuckpt-tmp-${dead}-0123abcd`, `.link.gpuckpt-tmp-${dead}-0123abcd`, '.notes.gpuckpt-tmp-x', '.other.gpuckpt-tmp-1-0123abcd'].sort(),
    );
    expect(await removeStaleTempDirs(join(root, 'missing'))).toEqual([]);
  });

  it('name the image they become, and their owner', () => {
    const work = join(root, `.job-3.gpuckpt-tmp-4242-0123abcd`);
    expect(publishedPath(work)).toBe(join(root, 'job-3'));
    expect(tempDirOwner(`.job-3.gpuckpt-tmp-4242-0123abcd`)).toBe(4242);
    expect(publishedPath(join(root, 'job-3'))).toBeUndefined();
    expect(tempDirOwner('job-3')).toBeUndefined();
  });
});

// ------------------------------------------------------------------ reader refusals

describe('reader refuses damaged images, each with its own code', () => {
  let path: string;
  let manifestPath: string;
  let dataPath: string;
  let manifestBytes: Buffer;
  beforeEach(async () => {
    path = join(root, 'img');
    await buildImage(path);
    manifestPath = join(path, MANIFEST_FILE);
    dataPath = join(path, DATA_FILE);
    manifestBytes = await readFile(manifestPath);
  });

  it('opens the intact image', async () => {
    expect(await openCode(path)).toBe('opened');
  });

  it('missing path: IMAGE_MISSING', async () => {
    expect(await openCode(join(root, 'nope'))).toBe('IMAGE_MISSING');
    expect(await openCode(join(dataPath, 'below-a-file'))).toBe('IMAGE_MISSING');
  });

  it('empty directory: IMAGE_MISSING; directory without manifest, or a file: IMAGE_NOT_AN_IMAGE', async () => {
    await mkdir(join(root, 'empty'));
    expect(await openCode(join(root, 'empty'))).toBe('IMAGE_MISSING');
    await rm(manifestPath);
    expect(await openCode(path)).toBe('IMAGE_NOT_AN_IMAGE');
    expect(await openCode(dataPath)).toBe('IMAGE_NOT_AN_IMAGE');
    await mkdir(manifestPath);
    expect(await openCode(path)).toBe('IMAGE_NOT_AN_IMAGE');
  });

  it('empty manifest file: IMAGE_TRUNCATED', async () => {
    await writeFile(manifestPath, '');
    expect(await openCode(path)).toBe('IMAGE_TRUNCATED');
  });

  it('manifest cut inside the header or the payload: IMAGE_TRUNCATED', async () => {
    const cuts = [1, 4, 7, 8, 10, 12, 15, 16, 30, 47, 48, 49, 48 + 10, manifestBytes.length - 1];
    for (const cut of cuts) {
      await writeFile(manifestPath, manifestBytes.subarray(0, cut));
      expect([cut, await openCode(path)]).toEqual([cut, 'IMAGE_TRUNCATED']);
    }
  });

  it('flipped byte in the magic: IMAGE_NOT_AN_IMAGE', async () => {
    for (const at of [0, 3, 7]) {
      await writeFile(manifestPath, manifestBytes);
      await flipByte(manifestPath, at);
      expect(await openCode(path)).toBe('IMAGE_NOT_AN_IMAGE');
    }
  });

  it('flipped byte in the SHA-256 or the payload: IMAGE_CORRUPT', async () => {
    for (const at of [16, 31, 47, 48, 60, manifestBytes.length >> 1, manifestBytes.length - 1]) {
      await writeFile(manifestPath, manifestBytes);
      await flipByte(manifestPath, at);
      expect([at, await openCode(path)]).toEqual([at, 'IMAGE_CORRUPT']);
    }
  });

  it('payload length field too big: IMAGE_TRUNCATED; too small or trailing bytes: IMAGE_CORRUPT', async () => {
    const bigger = Buffer.from(manifestBytes);
    bigger.writeUInt32LE(bigger.readUInt32LE(12) + 1, 12);
    await writeFile(manifestPath, bigger);
    expect(await openCode(path)).toBe('IMAGE_TRUNCATED');
    const smaller = Buffer.from(manifestBytes);
    smaller.writeUInt32LE(smaller.readUInt32LE(12) - 1, 12);
    await writeFile(manifestPath, smaller);
    expect(await openCode(path)).toBe('IMAGE_CORRUPT');
    await writeFile(manifestPath, Buffer.concat([manifestBytes, Buffer.from([0])]));
    expect(await openCode(path)).toBe('IMAGE_CORRUPT');
    const huge = Buffer.from(manifestBytes);
    huge.writeUInt32LE(0xffffffff, 12);
    await writeFile(manifestPath, huge);
    expect(await openCode(path)).toBe('IMAGE_CORRUPT');
  });

  it('unknown format version: IMAGE_VERSION, before the payload is looked at', async () => {
    const v99 = Buffer.from(manifestBytes);
    v99.writeUInt32LE(99, 8);
    await writeFile(manifestPath, v99);
    expect(await openCode(path)).toBe('IMAGE_VERSION');
    await ImageReader.open(path).catch((e: Error) => expect(e.message).toMatch(new RegExp(`format version 99; this gpuckpt reads versions 1 to ${FORMAT_VERSION}`)));
    // A newer format may differ after the version: garbage or a cut there is still IMAGE_VERSION.
    await writeFile(manifestPath, Buffer.concat([v99.subarray(0, 12), Buffer.from('entirely different layout')]));
    expect(await openCode(path)).toBe('IMAGE_VERSION');
    await writeFile(manifestPath, v99.subarray(0, 12));
    expect(await openCode(path)).toBe('IMAGE_VERSION');
    v99.writeUInt32LE(0, 8);
    await writeFile(manifestPath, v99);
    expect(await openCode(path)).toBe('IMAGE_VERSION');
  });

  it('pool.zst missing or truncated: IMAGE_TRUNCATED; longer than the frames: IMAGE_CORRUPT', async () => {
    const size = (await stat(dataPath)).size;
    await truncate(dataPath, size - 1);
    expect(await openCode(path)).toBe('IMAGE_TRUNCATED');
    await truncate(dataPath, 0);
    expect(await openCode(path)).toBe('IMAGE_TRUNCATED');
    await truncate(dataPath, size + 1);
    expect(await openCode(path)).toBe('IMAGE_CORRUPT');
    await rm(dataPath);
    expect(await openCode(path)).toBe('IMAGE_TRUNCATED');
  });

  it('flipped byte inside a frame: opens, then verify names the frame with IMAGE_DATA_CORRUPT', async () => {
    const reader0 = await ImageReader.open(path);
    const frames = reader0.manifest.data.frames;
    await reader0.close();
    const data = await readFile(dataPath);
    // Frame 2: random data; frame 5: zeros (tiny frame). Middle of the block, and the checksum.
    for (const i of [2, 5]) {
      const f = frames[i]!;
      for (const at of [Number(f.offset) + (f.compressedLength >> 1) + 3, Number(f.offset) + f.compressedLength - 1]) {
        await writeFile(dataPath, data);
        await flipByte(dataPath, at);
        const reader = await ImageReader.open(path);
        try {
          const err = await rejection(reader.verify());
          expect(err.code).toBe('IMAGE_DATA_CORRUPT');
          const addr = `0x${f.addr.toString(16)}`;
          expect(err.message).toContain(`frame ${i} (device ${f.device}, address ${addr}`);
          expect((await rejection(reader.readFrameData(i))).code).toBe('IMAGE_DATA_CORRUPT');
        } finally {
          await reader.close();
        }
      }
    }
  });

  it('manifest whose frame points past the end of pool.zst: IMAGE_CORRUPT', async () => {
    await rewriteManifest(path, (m) => {
      m.data.frames[m.data.frames.length - 1]!.offset += 4096n;
    });
    const err = await rejection(ImageReader.open(path));
    expect(err.code).toBe('IMAGE_CORRUPT');
    expect(err.message).toMatch(/extends past the end of pool\.zst/);
  });

  it('manifest with overlapping allocations: IMAGE_CORRUPT', async () => {
    await rewriteManifest(path, (m) => {
      m.allocations[1]!.addr = m.allocations[0]!.addr + 4096n;
    });
    const err = await rejection(ImageReader.open(path));
    expect(err.code).toBe('IMAGE_CORRUPT');
    expect(err.message).toMatch(/overlap/);
  });

  it('manifest with a frame outside its allocation: IMAGE_CORRUPT', async () => {
    await rewriteManifest(path, (m) => {
      m.data.frames[0]!.addr = m.allocations[0]!.addr + 10n * MiB;
    });
    const err = await rejection(ImageReader.open(path));
    expect(err.code).toBe('IMAGE_CORRUPT');
    expect(err.message).toMatch(/frame 0 .* is not inside an allocation/);
  });

  // Root ignores permission bits, so this can only be checked as another user.
  it.skipIf(process.getuid?.() === 0)('unreadable files: IMAGE_READ_FAILED', async () => {
    await chmod(manifestPath, 0);
    expect(await openCode(path)).toBe('IMAGE_READ_FAILED');
  });
});

describe('codec pool', () => {
  it('decompresses frames its workers read from the image file into staging mapped once for all of them, and says which file failed', async () => {
    const { CodecPool } = await import(new URL('../dist/controller/engine/codec-pool.js', import.meta.url).href);
    const { createStaging } = await import(new URL('../dist/controller/engine/staging-files.js', import.meta.url).href);
    const dir = await mkdtemp(join(tmpdir(), 'gpuckpt-codec-'));
    const raws = [0, 1, 2, 3].map((i) => pseudoRandom((3 << 20) + i * 4096, 20 + i));
    const frames = raws.map((r) => compressFrame(r));
    const data = join(dir, 'pool.zst');
    await writeFile(data, Buffer.concat(frames));
    // Small files: a frame crosses from one memfd into the next.
    const staging = createStaging(16 << 20, { GPUCKPT_STAGING_FILE: '2M' });
    const pool = new CodecPool(2);
    try {
      await pool.mapStaging(staging);
      let at = 0;
      const placed: number[] = [];
      await Promise.all(
        frames.map((f, i) => {
          const offset = frames.slice(0, i).reduce((n, g) => n + g.length, 0);
          placed.push(at);
          const p = pool.decompressInto({ path: data, offset, length: f.length }, at, raws[i]!.length, `frame ${i}`);
          at += raws[i]!.length;
          return p;
        }),
      );
      // Mapped again (as a restore does for the shim's own staging): the workers take the new mapping.
      await pool.mapStaging(staging);
      const base = native().mapShared(staging.fds, staging.fileBytes, staging.size);
      try {
        raws.forEach((r, i) => expect(Buffer.from(native().viewAt(base + BigInt(placed[i]!), r.length)).equals(r)).toBe(true));
      } finally {
        await native().unmapShared(base);
      }
      const cut = join(dir, 'cut.zst');
      await writeFile(cut, frames[0]!.subarray(0, 1000));
      await expect(pool.decompressInto({ path: cut, offset: 0, length: frames[0]!.length }, 0, raws[0]!.length, 'frame 0')).rejects.toMatchObject({ code: 'IMAGE_TRUNCATED' });
      await expect(pool.decompressInto({ path: join(dir, 'gone.zst'), offset: 0, length: 10 }, 0, raws[0]!.length, 'frame 0')).rejects.toMatchObject({
        code: 'IMAGE_READ_FAILED',
        message: expect.stringContaining('gone.zst'),
      });
    } finally {
      await pool.close();
      for (const fd of staging.fds) native().closeFd(fd);
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('a shared mapping: views inside it only, its data kept by the memfds after an unmap that drops its pages from several threads', async () => {
    const file = 128 << 20;
    const size = 512 << 20; // two slices of 256 MiB or more: the parallel drop runs wherever there are 2 cores
    const fds = [0, 1, 2, 3].map(() => native().createMemfd(file));
    try {
      let base = native().mapShared(fds, file, size);
      for (let off = 0; off < size; off += 1 << 20) new Uint8Array(native().viewAt(base + BigInt(off), 4096)).fill((off >> 20) & 255);
      expect(() => native().viewAt(base + BigInt(size - 4096), 8192)).toThrow(/viewAt: Invalid argument/);
      expect(() => native().viewAt(base - 4096n, 4096)).toThrow(/viewAt: Invalid argument/);
      const unmapped = native().unmapShared(base);
      // Gone for every caller at once, before its pages are.
      expect(() => native().unmapShared(base)).toThrow(/unmapShared: Invalid argument/);
      expect(() => native().viewAt(base, 4096)).toThrow(/viewAt: Invalid argument/);
      await unmapped;
      base = native().mapShared(fds, file, size);
      try {
        let wrong = 0;
        for (let off = 0; off < size; off += 1 << 20) wrong += Number(new Uint8Array(native().viewAt(base + BigInt(off), 1))[0] !== ((off >> 20) & 255));
        expect(wrong).toBe(0);
      } finally {
        await native().unmapShared(base);
      }
    } finally {
      for (const fd of fds) native().closeFd(fd);
    }
  });

  it("shares out workers started ahead (a checkpoint's, cli/workers-ahead.ts): each pool runs its own frames, and closing one cancels none of another's", async () => {
    const { prestartCodecPool, codecPool } = await import(new URL('../dist/controller/engine/codec-pool.js', import.meta.url).href);
    const raw = pseudoRandom(8 << 20, 6);
    const good = compressFrame(raw);
    prestartCodecPool(3);
    const carved = codecPool(1); // one of the three
    const rest = codecPool(2); // the two left, the pool itself
    expect([carved.size, rest.size]).toEqual([1, 2]);
    const done = { carved: 0, rest: 0 };
    // Copied first: queued at once, one worker cannot have checked 40 frames of 8 MiB before the close.
    const copies = Array.from({ length: 80 }, () => Uint8Array.from(good));
    const queue = (pool: any, key: keyof typeof done, from: number) =>
      copies.slice(from, from + 40).map((f, i) => pool.verify(f, raw.length, `frame ${i}`).then(() => done[key]++));
    const restFrames = queue(rest, 'rest', 0);
    queue(carved, 'carved', 40);
    await carved.close(); // cancels what its one worker has queued
    await Promise.all(restFrames);
    await rest.close();
    expect(done.rest).toBe(40);
    expect(done.carved).toBeLessThan(40);
  });

  it('closing with frames queued waits for the frames being decoded, drops the rest, and leaves nothing to reject', async () => {
    // The pool's worker is the built one (dist/), as the CLI runs it.
    const { CodecPool } = await import(new URL('../dist/controller/engine/codec-pool.js', import.meta.url).href);
    const raw = pseudoRandom(8 << 20, 5);
    const good = compressFrame(raw);
    const pool = new CodecPool(2);
    const unhandled: unknown[] = [];
    const onUnhandled = (e: unknown) => unhandled.push(e);
    process.on('unhandledRejection', onUnhandled);
    try {
      const done: boolean[] = [];
      const frames = Array.from({ length: 40 }, () => Uint8Array.from(good));
      frames.forEach((f, i) => pool.verify(f, raw.length, `frame ${i}`).then(() => (done[i] = true)));
      // At once: 2 workers cannot have decoded 40 frames of 8 MiB (about
      // a millisecond each) by the time close() marks the rest cancelled.
      await pool.close(); // resolves: the workers' queues were answered
      await new Promise((r) => setTimeout(r, 50));
      const finished = done.filter(Boolean).length;
      expect(finished).toBeLessThan(40);
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
});
