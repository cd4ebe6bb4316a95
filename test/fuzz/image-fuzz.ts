/**
 * Fuzzer for the image reader: manifests and data frames, damaged at random
 * (seeded, so a failure replays). Three kinds of input:
 *  - raw bytes of the manifest file flipped, cut or extended;
 *  - the decoded manifest changed structurally (a field set to another type,
 *    a number out of range, a key removed, an array grown) and signed again
 *    with a correct SHA-256, so the validator itself is what is tested;
 *  - bytes of pool.zst flipped, cut or extended.
 * Half the inputs start from an incremental image (frames for part of its
 * allocations, the rest from a parent image beside it), so the chain's
 * checks (openParents, planChain) are fuzzed too.
 * Every input must be either read and verified in full, or refused with a
 * GpuckptError; anything else (another exception, a crash, a manifest
 * accepted with frames outside its allocations or pool) is a finding.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { GpuckptError } from '../../controller/base/errors.js';
import { decodeBySpec, encodeBySpec } from '../helpers/manifest-bytes.js';
import { manifestSha256, openParents, planChain } from '../../controller/image/chain.js';
import { toPlanes } from '../../controller/image/byte-planes.js';
import { compressPlanes } from '../../controller/image/frame-codec.js';
import {
  compressFrame,
  DATA_FILE,
  encodeManifest,
  FORMAT_VERSION,
  ImageReader,
  MANIFEST_FILE,
  type FrameRecord,
  type Manifest,
} from '../../controller/image/index.js';

export interface FuzzResult {
  inputs: number;
  accepted: number;
  refused: Record<string, number>;
}

/** xorshift64*: deterministic from the seed. */
function rng(seed: number): () => number {
  let x = BigInt(seed) | 1n;
  return () => {
    x ^= x >> 12n;
    x ^= (x << 25n) & 0xffffffffffffffffn;
    x ^= x >> 27n;
    return Number(((x * 0x2545f4914f6cdd1dn) & 0xffffffffffffffffn) >> 11n) / 2 ** 53;
  };
}

/** A small, valid image: 2 devices, allocations of several sizes, random and zero data. */
function baseImage(rand: () => number): { manifest: Manifest; data: Buffer } {
  const base = 0x600000000000n;
  const slice = 1n << 30n;
  const allocations = [
    { device: 0, addr: base, size: 8192n },
    { device: 0, addr: base + 0x200000n, size: 100000n },
    { device: 1, addr: base + slice, size: 4096n },
  ];
  const frames: FrameRecord[] = [];
  const chunks: Buffer[] = [];
  let offset = 0n;
  for (const a of allocations) {
    for (let off = 0n; off < a.size; off += 65536n) {
      const len = Number(a.size - off < 65536n ? a.size - off : 65536n);
      const raw = Buffer.alloc(len);
      if (rand() < 0.5) for (let i = 0; i < len; i++) raw[i] = Math.floor(rand() * 256);
      // Some frames as byte planes, a zstd frame per plane, some planes stored (format 5).
      const planes = rand() < 0.4 ? 4 : undefined;
      const z = planes ? compressPlanes(toPlanes(raw, planes, Buffer.alloc(len)), planes, Math.floor(rand() * 16)) : compressFrame(raw);
      frames.push({ device: a.device, addr: a.addr + off, length: len, offset, compressedLength: z.length, ...(planes ? { planes } : {}) });
      chunks.push(z);
      offset += BigInt(z.length);
    }
  }
  const data = Buffer.concat(chunks);
  // Digests of 4 KiB blocks (values do not matter to the reader, lengths do).
  const blocks = {
    size: 4096,
    digests: allocations.map((a) => Buffer.from(Array.from({ length: Number((a.size + 4095n) / 4096n) * 8 }, () => Math.floor(rand() * 256)))),
  };
  const manifest: Manifest = {
    format: 'gpuckpt-image',
    version: FORMAT_VERSION,
    protocolVersion: 2,
    kind: 'gpu-only',
    createdAt: new Date(0).toISOString(),
    source: { pid: 1234, command: ['./app', '--x'], host: 'fuzz', uid: 0 },
    pool: { base, sliceSize: slice, deviceCount: 2, quantum: 512n },
    devices: [
      { ordinal: 0, name: 'GPU A', uuid: 'GPU-a', totalMemory: 1n << 34n },
      { ordinal: 1, name: 'GPU A', uuid: 'GPU-b', totalMemory: 1n << 34n },
    ],
    allocations,
    outsidePool: { managed: 0n, streamOrdered: 0n, host: 0n, unrouted: 0n },
    data: { file: 'pool.zst', frames, rawBytes: BigInt(frames.reduce((s, f) => s + f.length, 0)), storedBytes: BigInt(data.length) },
    blocks,
  };
  return { manifest, data };
}

/** A child of `parent` (at parentPath) holding every other frame of it: the rest comes from the parent. */
function childImage(parent: { manifest: Manifest; data: Buffer }, parentPath: string, manifestSha256: Uint8Array): { manifest: Manifest; data: Buffer } {
  const kept = parent.manifest.data.frames.filter((_, i) => i % 2 === 0);
  const chunks: Buffer[] = [];
  let offset = 0n;
  const frames = kept.map((f) => {
    const z = parent.data.subarray(Number(f.offset), Number(f.offset) + f.compressedLength);
    chunks.push(z);
    const moved = { ...f, offset };
    offset += BigInt(z.length);
    return moved;
  });
  const data = Buffer.concat(chunks);
  const manifest: Manifest = {
    ...parent.manifest,
    data: { file: 'pool.zst', frames, rawBytes: BigInt(frames.reduce((s, f) => s + f.length, 0)), storedBytes: BigInt(data.length) },
    parent: { path: parentPath, manifestSha256 },
  };
  return { manifest, data };
}

const WILD_VALUES = (rand: () => number): unknown[] => [
  -1n,
  0n,
  1n << 63n,
  (1n << 64n) - 1n,
  BigInt(Math.floor(rand() * 2 ** 48)),
  -5,
  0,
  2 ** 53,
  Math.floor(rand() * 1e6),
  1.5,
  NaN,
  '',
  '../../etc/passwd',
  'x'.repeat(1000),
  null,
  true,
  [],
  [1, 2, 3],
  {},
  { a: 1 },
  new Array(50).fill(0),
];

/** Replaces, removes or grows one randomly chosen node of a decoded manifest. */
function mutateStructure(obj: any, rand: () => number): void {
  const paths: { parent: any; key: string | number }[] = [];
  const walk = (node: any, depth: number) => {
    // Byte strings (digests, hashes) are leaves: replaced whole, never entered.
    if (node === null || typeof node !== 'object' || ArrayBuffer.isView(node) || depth > 6) return;
    for (const key of Array.isArray(node) ? node.keys() : Object.keys(node)) {
      paths.push({ parent: node, key });
      walk(node[key], depth + 1);
    }
  };
  walk(obj, 0);
  const { parent, key } = paths[Math.floor(rand() * paths.length)]!;
  const r = rand();
  if (r < 0.15 && !Array.isArray(parent)) delete parent[key];
  else if (r < 0.25 && Array.isArray(parent[key]) && parent[key].length) parent[key].push(structuredClone(parent[key][0]));
  else if (r < 0.35 && typeof parent[key] === 'bigint') {
    // Nudged, but kept within what msgpack can hold (a u64 or an i64).
    const v = parent[key] + BigInt(Math.floor(rand() * 2 ** 32)) - (1n << 31n);
    parent[key] = v > (1n << 64n) - 1n ? (1n << 64n) - 1n : v < -(1n << 63n) ? -(1n << 63n) : v;
  }
  else {
    const wild = WILD_VALUES(rand);
    parent[key] = wild[Math.floor(rand() * wild.length)];
  }
}

function mutateBytes(buf: Buffer, rand: () => number): Buffer {
  const r = rand();
  if (r < 0.2) return buf.subarray(0, Math.floor(rand() * buf.length));
  if (r < 0.3) return Buffer.concat([buf, Buffer.from([Math.floor(rand() * 256), 0, 1])]);
  const out = Buffer.from(buf);
  const flips = 1 + Math.floor(rand() * 4);
  for (let i = 0; i < flips; i++) {
    const at = Math.floor(rand() * out.length);
    out[at] = out[at]! ^ (1 + Math.floor(rand() * 255)); // always a change
  }
  return out;
}

/** What an accepted manifest must guarantee before restore trusts it. */
function checkInvariants(m: Manifest, dataSize: number): void {
  const slice = (d: number) => [m.pool.base + BigInt(d) * m.pool.sliceSize, m.pool.base + BigInt(d + 1) * m.pool.sliceSize];
  for (const a of m.allocations) {
    const [lo, hi] = slice(a.device);
    if (a.addr < lo || a.addr + a.size > hi) throw new Error(`accepted an allocation outside its slice: ${a.addr}`);
  }
  for (const f of m.data.frames) {
    const owner = m.allocations.find((a) => a.device === f.device && f.addr >= a.addr && f.addr + BigInt(f.length) <= a.addr + a.size);
    if (!owner) throw new Error(`accepted a frame outside every allocation: ${f.addr}`);
    if (f.offset + BigInt(f.compressedLength) > BigInt(dataSize)) throw new Error('accepted a frame past the end of pool.zst');
  }
}

async function tryInput(dir: string, dataSize: number, result: FuzzResult): Promise<void> {
  result.inputs++;
  let reader: ImageReader | undefined;
  try {
    reader = await ImageReader.open(dir);
    checkInvariants(reader.manifest, dataSize);
    await reader.verify();
    const parents = await openParents(reader);
    try {
      planChain([reader, ...parents]);
    } finally {
      await Promise.all(parents.map((p) => p.close()));
    }
    result.accepted++;
  } catch (e) {
    if (!(e instanceof GpuckptError)) throw new Error(`input ${result.inputs}: not a GpuckptError: ${(e as Error)?.stack ?? e}`);
    result.refused[e.code] = (result.refused[e.code] ?? 0) + 1;
  } finally {
    await reader?.close();
  }
}

export async function fuzzImages(opts: { seed: number; count: number; dir: string }): Promise<FuzzResult> {
  const rand = rng(opts.seed);
  const full = baseImage(rand);
  // The full image also stands, unchanged, as the incremental one's parent.
  const parentDir = join(opts.dir, 'parent');
  mkdirSync(parentDir, { recursive: true });
  writeFileSync(join(parentDir, MANIFEST_FILE), encodeManifest(full.manifest));
  writeFileSync(join(parentDir, DATA_FILE), full.data);
  const child = childImage(full, parentDir, await manifestSha256(parentDir));
  const starts = [full, child].map(({ manifest, data }) => {
    const good = encodeManifest(manifest);
    return { good, decoded: decodeBySpec(good), data };
  });
  const dir = join(opts.dir, 'image');
  mkdirSync(dir, { recursive: true });
  const result: FuzzResult = { inputs: 0, accepted: 0, refused: {} };
  for (let i = 0; i < opts.count; i++) {
    const { good, decoded, data } = starts[i % 2]!;
    const kind = rand();
    let manifestBytes = good;
    let dataBytes = data;
    if (kind < 0.3) manifestBytes = mutateBytes(good, rand);
    else if (kind < 0.75) {
      const m = structuredClone(decoded);
      for (let k = 1 + Math.floor(rand() * 3); k > 0; k--) mutateStructure(m, rand);
      manifestBytes = encodeBySpec(m, FORMAT_VERSION);
    } else dataBytes = mutateBytes(data, rand);
    writeFileSync(join(dir, MANIFEST_FILE), manifestBytes);
    writeFileSync(join(dir, DATA_FILE), dataBytes);
    await tryInput(dir, dataBytes.length, result);
  }
  return result;
}
