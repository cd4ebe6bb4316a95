/**
 * Strict validation of a decoded manifest payload.
 *
 * The SHA-256 in the header already catches bit rot, so what this catches is a
 * manifest that was written wrong (a writer bug, a hand-edited or foreign
 * file). Restore trusts these numbers to decide which device addresses it
 * overwrites, so every field's type and every geometric relation is checked:
 *
 * - addresses and sizes are BigInt >= 0, counts are safe integers;
 * - each allocation lies inside its device's pool slice
 *   [base + device*sliceSize, base + (device+1)*sliceSize) and no two overlap;
 * - the frames of each allocation cover it exactly (no gap, no overlap), so
 *   restoring the frames restores every byte of every allocation, once,
 *   but for two kinds of gap: blocks whose digest is 0 (all zeros: the
 *   restore sets them to zero), the ranges the framework held unused
 *   (`unused`: inside allocations, sorted, disjoint; a restore leaves them
 *   as they are), and, in an image with a parent, any (those
 *   bytes come from the parent chain, checked when the chain is opened);
 *   never overlaps. A reader that does not know either refuses such an
 *   image on its gaps;
 * - block digests, when present, have one 8-byte digest per block of each
 *   allocation;
 * - the frames are stored back to back in pool.zst from offset 0 to
 *   data.storedBytes (the writer appends them sequentially), so a frame can
 *   never point outside the data file nor share bytes with another frame;
 * - rawBytes is the sum of frame lengths.
 *
 * Unknown keys are ignored and dropped from the result: informational fields
 * may be added without a format bump, anything a reader must understand
 * requires a new FORMAT_VERSION.
 */
import type {
  AllocationRecord,
  BlockDigests,
  DataSection,
  DeviceRecord,
  FrameRecord,
  ImageSource,
  Manifest,
  OutsidePoolBytes,
  ParentRecord,
  PoolLayout,
} from './manifest-types.js';
import { AllocationBlocks } from './blocks.js';
import { DATA_FILE, FORMAT_VERSION, MAX_DEVICES, MAX_FRAME_LENGTH, MIN_DIGEST_BLOCK, OLDEST_FORMAT_VERSION, PLANE_FRAMES_FORMAT_VERSION, PLANES_FORMAT_VERSION, planeParts, storedFrameBound, UNUSED_FORMAT_VERSION } from './format.js';
import { firstEndingAfter, withoutUnused } from './unused-ranges.js';

export type ManifestCheck = { ok: true; manifest: Manifest } | { ok: false; problem: string };

const U64_LIMIT = 1n << 64n;

/** Thrown inside this module only, to unwind to checkManifest with a message. */
class Problem {
  constructor(readonly message: string) {}
}

/** Check a decoded payload; returns a clean copy holding only schema fields, or what is wrong. */
export function checkManifest(value: unknown): ManifestCheck {
  try {
    return { ok: true, manifest: checkShape(value) };
  } catch (e) {
    if (e instanceof Problem) return { ok: false, problem: e.message };
    throw e;
  }
}

export function hex(v: bigint): string {
  return `0x${v.toString(16)}`;
}

// ---------------------------------------------------------------- shape

function checkShape(value: unknown): Manifest {
  const o = obj(value, 'manifest');
  if (o.format !== 'gpuckpt-image') fail(`format is ${show(o.format)}, expected 'gpuckpt-image'`);
  if (typeof o.version !== 'number' || o.version < OLDEST_FORMAT_VERSION || o.version > FORMAT_VERSION)
    fail(`payload version is ${show(o.version)}, expected ${OLDEST_FORMAT_VERSION}..${FORMAT_VERSION}`);
  if (o.kind !== 'gpu-only' && o.kind !== 'process') fail(`kind is ${show(o.kind)}, expected 'gpu-only' or 'process'`);
  const createdAt = str(o.createdAt, 'createdAt');
  if (Number.isNaN(Date.parse(createdAt))) fail(`createdAt ${show(createdAt)} is not a date`);

  const s = obj(o.source, 'source');
  const source: ImageSource = {
    pid: int(s.pid, 'source.pid', 1),
    command: arr(s.command, 'source.command').map((c, i) => str(c, `source.command[${i}]`)),
    host: str(s.host, 'source.host'),
    uid: int(s.uid, 'source.uid', 0),
  };

  const p = obj(o.pool, 'pool');
  const pool: PoolLayout = {
    base: big(p.base, 'pool.base'),
    sliceSize: big(p.sliceSize, 'pool.sliceSize', 1n),
    deviceCount: int(p.deviceCount, 'pool.deviceCount', 1, MAX_DEVICES),
    quantum: big(p.quantum, 'pool.quantum', 1n),
  };
  if (pool.base + BigInt(pool.deviceCount) * pool.sliceSize > U64_LIMIT) {
    fail(`pool [${hex(pool.base)}, +${pool.deviceCount} x ${hex(pool.sliceSize)}) does not fit in 64-bit addresses`);
  }

  const devices: DeviceRecord[] = arr(o.devices, 'devices').map((v, i) => {
    const d = obj(v, `devices[${i}]`);
    return {
      ordinal: int(d.ordinal, `devices[${i}].ordinal`, 0, pool.deviceCount - 1),
      name: str(d.name, `devices[${i}].name`),
      uuid: str(d.uuid, `devices[${i}].uuid`),
      totalMemory: big(d.totalMemory, `devices[${i}].totalMemory`),
    };
  });

  const allocations: AllocationRecord[] = arr(o.allocations, 'allocations').map((v, i) => {
    const a = obj(v, `allocations[${i}]`);
    return {
      device: int(a.device, `allocations[${i}].device`, 0, pool.deviceCount - 1),
      addr: big(a.addr, `allocations[${i}].addr`),
      size: big(a.size, `allocations[${i}].size`, 1n),
    };
  });

  const op = obj(o.outsidePool, 'outsidePool');
  const outsidePool: OutsidePoolBytes = {
    managed: big(op.managed, 'outsidePool.managed'),
    streamOrdered: big(op.streamOrdered, 'outsidePool.streamOrdered'),
    host: big(op.host, 'outsidePool.host'),
    unrouted: big(op.unrouted, 'outsidePool.unrouted'),
  };

  const dt = obj(o.data, 'data');
  if (dt.file !== DATA_FILE) fail(`data.file is ${show(dt.file)}, expected '${DATA_FILE}'`);
  const frames: FrameRecord[] = arr(dt.frames, 'data.frames').map((v, i) => {
    const f = obj(v, `data.frames[${i}]`);
    const length = int(f.length, `data.frames[${i}].length`, 1, MAX_FRAME_LENGTH);
    if (f.planes !== undefined && ((f.planes !== 2 && f.planes !== 4) || (o.version as number) < PLANES_FORMAT_VERSION))
      fail(`data.frames[${i}].planes is ${show(f.planes)}: 2 or 4, from format version ${PLANES_FORMAT_VERSION}`);
    return {
      device: int(f.device, `data.frames[${i}].device`, 0, pool.deviceCount - 1),
      addr: big(f.addr, `data.frames[${i}].addr`),
      length,
      offset: big(f.offset, `data.frames[${i}].offset`),
      compressedLength: int(f.compressedLength, `data.frames[${i}].compressedLength`, 1, frameBound(length, (o.version as number) >= PLANE_FRAMES_FORMAT_VERSION ? (f.planes as 2 | 4 | undefined) : undefined)),
      ...(f.planes !== undefined ? { planes: f.planes as 2 | 4 } : {}),
    };
  });
  const data: DataSection = {
    file: DATA_FILE,
    frames,
    rawBytes: big(dt.rawBytes, 'data.rawBytes'),
    storedBytes: big(dt.storedBytes, 'data.storedBytes'),
  };

  const manifest: Manifest = {
    format: 'gpuckpt-image',
    version: o.version,
    protocolVersion: int(o.protocolVersion, 'protocolVersion', 0),
    kind: o.kind as Manifest['kind'],
    createdAt,
    source,
    pool,
    devices,
    allocations,
    outsidePool,
    data,
  };
  if (o.stats !== undefined) {
    const st = obj(o.stats, 'stats');
    const stats: Record<string, number> = {};
    for (const [k, v] of Object.entries(st)) {
      if (typeof v !== 'number' || !Number.isFinite(v)) fail(`stats.${k} is ${show(v)}, expected a finite number`);
      stats[k] = v;
    }
    manifest.stats = stats;
  }

  if (o.blocks !== undefined) manifest.blocks = checkBlocks(o.blocks, allocations);
  if (o.unused !== undefined) {
    if ((o.version as number) < UNUSED_FORMAT_VERSION) fail(`unused ranges come from format version ${UNUSED_FORMAT_VERSION} on`);
    manifest.unused = checkUnused(o.unused, allocations);
  }
  if (o.parent !== undefined) {
    const pr = obj(o.parent, 'parent');
    const parent: ParentRecord = { path: str(pr.path, 'parent.path'), manifestSha256: bin(pr.manifestSha256, 'parent.manifestSha256', 32) };
    if (!parent.path.startsWith('/')) fail(`parent.path ${show(parent.path)} is not an absolute path`);
    manifest.parent = parent;
  }

  checkDevices(devices, pool);
  checkAllocations(allocations, pool);
  checkFrames(frames, allocations, pool, data.storedBytes, gapRule(manifest));
  checkTotals(manifest);
  return manifest;
}

// ---------------------------------------------------------------- geometry

function checkDevices(devices: DeviceRecord[], pool: PoolLayout): void {
  // Every slice of the pool belongs to exactly one device of the process.
  if (devices.length !== pool.deviceCount) {
    fail(`${devices.length} devices listed but pool.deviceCount is ${pool.deviceCount}`);
  }
  const seen = new Set<number>();
  for (const d of devices) {
    if (seen.has(d.ordinal)) fail(`device ordinal ${d.ordinal} is listed twice`);
    seen.add(d.ordinal);
  }
}

function sliceOf(pool: PoolLayout, device: number): { start: bigint; end: bigint } {
  const start = pool.base + BigInt(device) * pool.sliceSize;
  return { start, end: start + pool.sliceSize };
}

function checkAllocations(allocations: AllocationRecord[], pool: PoolLayout): void {
  allocations.forEach((a, i) => {
    const { start, end } = sliceOf(pool, a.device);
    if (a.addr < start || a.addr + a.size > end) {
      fail(`allocation ${i} (device ${a.device}, ${hex(a.addr)}+${hex(a.size)}) lies outside the device's pool slice [${hex(start)}, ${hex(end)})`);
    }
  });
  // Slices are disjoint and each allocation is inside its own, so one global
  // sort by address finds overlaps across and within devices.
  const sorted = allocations.map((a, i) => ({ a, i })).sort((x, y) => cmp(x.a.addr, y.a.addr));
  for (let k = 1; k < sorted.length; k++) {
    const prev = sorted[k - 1]!;
    const cur = sorted[k]!;
    if (prev.a.addr + prev.a.size > cur.a.addr) {
      fail(`allocations ${prev.i} (${hex(prev.a.addr)}+${hex(prev.a.size)}) and ${cur.i} (${hex(cur.a.addr)}+${hex(cur.a.size)}) overlap`);
    }
  }
}

function checkBlocks(v: unknown, allocations: AllocationRecord[]): BlockDigests {
  const b = obj(v, 'blocks');
  const size = int(b.size, 'blocks.size', MIN_DIGEST_BLOCK);
  if (size % MIN_DIGEST_BLOCK) fail(`blocks.size ${size} is not a multiple of ${MIN_DIGEST_BLOCK}`);
  const digests = arr(b.digests, 'blocks.digests');
  if (digests.length !== allocations.length) fail(`blocks.digests has ${digests.length} entries for ${allocations.length} allocations`);
  return {
    size,
    digests: digests.map((d, i) => bin(d, `blocks.digests[${i}]`, Number((allocations[i]!.size + BigInt(size) - 1n) / BigInt(size)) * 8)),
  };
}

/** Each range inside one allocation, on its device; sorted by address and disjoint. */
function checkUnused(v: unknown, allocations: AllocationRecord[]): AllocationRecord[] {
  const sorted = [...allocations].sort((x, y) => cmp(x.addr, y.addr));
  let prevEnd = -1n;
  return arr(v, 'unused').map((r, i) => {
    const u = obj(r, `unused[${i}]`);
    const range: AllocationRecord = { device: int(u.device, `unused[${i}].device`, 0, MAX_DEVICES - 1), addr: big(u.addr, `unused[${i}].addr`), size: big(u.size, `unused[${i}].size`) };
    const a = sorted[firstEndingAfter(sorted, range.addr)];
    if (range.size === 0n || !a || a.device !== range.device || a.addr > range.addr || range.addr + range.size > a.addr + a.size)
      fail(`unused[${i}] (device ${range.device}, ${hex(range.addr)}+${hex(range.size)}) is not inside one allocation`);
    if (range.addr < prevEnd) fail(`unused[${i}] (${hex(range.addr)}) overlaps or precedes the range before it`);
    prevEnd = range.addr + range.size;
    return range;
  });
}

/** Whether allocation ai may be without a frame for [start, end): see the header comment. */
type GapRule = (ai: number, start: bigint, end: bigint) => boolean;

function gapRule(m: Manifest): GapRule {
  if (m.parent) return () => true;
  const blocks = m.blocks;
  const unused = m.unused ?? [];
  // The gap's bytes outside the unused ranges must be zero blocks.
  const zeros = (ai: number, start: bigint, end: bigint): boolean => {
    if (!blocks) return false;
    const a = m.allocations[ai]!;
    const b = new AllocationBlocks(a, blocks.size, blocks.digests[ai]!);
    const last = Math.floor(Number(end - a.addr - 1n) / blocks.size);
    for (let k = Math.floor(Number(start - a.addr) / blocks.size); k <= last; k++) if (!b.isZero(k)) return false;
    return true;
  };
  return (ai, start, end) => {
    const gap = { device: m.allocations[ai]!.device, addr: start, size: end - start };
    return withoutUnused([gap], unused).every((p) => zeros(ai, p.addr, p.addr + p.size));
  };
}

function checkFrames(frames: FrameRecord[], allocations: AllocationRecord[], pool: PoolLayout, storedBytes: bigint, gapOk: GapRule): void {
  const name = (i: number): string => {
    const f = frames[i]!;
    return `frame ${i} (device ${f.device}, ${hex(f.addr)}+${hex(BigInt(f.length))})`;
  };

  // Where each frame's bytes go on the device.
  const sortedAllocs = allocations.map((a, i) => ({ a, i })).sort((x, y) => cmp(x.a.addr, y.a.addr));
  const framesOfAlloc = new Map<number, number[]>();
  frames.forEach((f, i) => {
    const { start, end } = sliceOf(pool, f.device);
    const fEnd = f.addr + BigInt(f.length);
    if (f.addr < start || fEnd > end) fail(`${name(i)} lies outside the device's pool slice [${hex(start)}, ${hex(end)})`);
    const owner = findContaining(sortedAllocs, f.addr);
    if (owner === undefined || owner.a.device !== f.device || fEnd > owner.a.addr + owner.a.size) {
      fail(`${name(i)} is not inside an allocation`);
    }
    const list = framesOfAlloc.get(owner.i) ?? [];
    list.push(i);
    framesOfAlloc.set(owner.i, list);
  });
  allocations.forEach((a, ai) => {
    const list = (framesOfAlloc.get(ai) ?? []).sort((x, y) => cmp(frames[x]!.addr, frames[y]!.addr));
    let cursor = a.addr;
    for (const fi of list) {
      const f = frames[fi]!;
      if (f.addr < cursor) fail(`${name(fi)} overlaps another frame of allocation ${ai}`);
      if (f.addr > cursor && !gapOk(ai, cursor, f.addr)) fail(`allocation ${ai} (device ${a.device}, ${hex(a.addr)}+${hex(a.size)}) has no data for [${hex(cursor)}, ${hex(f.addr)})`);
      cursor = f.addr + BigInt(f.length); // past a gap too, so an overlap after it is still seen
    }
    const end = a.addr + a.size;
    if (cursor !== end && !(cursor < end && gapOk(ai, cursor, end))) fail(`allocation ${ai} (device ${a.device}, ${hex(a.addr)}+${hex(a.size)}) has no data for [${hex(cursor)}, ${hex(end)})`);
  });

  // Where each frame's bytes are in pool.zst.
  frames.forEach((f, i) => {
    const fileEnd = f.offset + BigInt(f.compressedLength);
    if (fileEnd > storedBytes) {
      fail(`${name(i)} at pool.zst bytes [${f.offset}, ${fileEnd}) extends past the end of pool.zst (${storedBytes} bytes)`);
    }
  });
  const byOffset = frames.map((_, i) => i).sort((x, y) => cmp(frames[x]!.offset, frames[y]!.offset));
  let expected = 0n;
  for (const i of byOffset) {
    const f = frames[i]!;
    if (f.offset < expected) fail(`${name(i)} shares bytes of pool.zst with another frame (offset ${f.offset})`);
    if (f.offset > expected) fail(`pool.zst bytes [${expected}, ${f.offset}) belong to no frame`);
    expected += BigInt(f.compressedLength);
  }
  if (expected !== storedBytes) fail(`pool.zst bytes [${expected}, ${storedBytes}) belong to no frame`);
}

function checkTotals(m: Manifest): void {
  const raw = m.data.frames.reduce((sum, f) => sum + BigInt(f.length), 0n);
  if (raw !== m.data.rawBytes) fail(`data.rawBytes is ${m.data.rawBytes} but the frames hold ${raw} bytes`);
}

/** The allocation with the greatest address <= addr, if any. */
function findContaining(sorted: { a: AllocationRecord; i: number }[], addr: bigint): { a: AllocationRecord; i: number } | undefined {
  let lo = 0;
  let hi = sorted.length - 1;
  let found: { a: AllocationRecord; i: number } | undefined;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const cand = sorted[mid]!;
    if (cand.a.addr <= addr) {
      found = cand;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return found;
}

/** The longest a frame's data may be: one zstd frame, or one per byte plane (from format 5), each compressed or stored. */
function frameBound(n: number, planes: 2 | 4 | undefined): number {
  if (!planes) return zstdCompressBound(n);
  return planeParts(n, planes).reduce((s, [a, b]) => s + Math.max(zstdCompressBound(b - a), storedFrameBound(b - a)), 0);
}

/** ZSTD_COMPRESSBOUND from zstd.h: no valid frame of `n` input bytes is longer. */
function zstdCompressBound(n: number): number {
  const small = 128 * 1024;
  return n + (n >>> 8) + (n < small ? (small - n) >>> 11 : 0);
}

// ---------------------------------------------------------------- primitives

function fail(message: string): never {
  throw new Problem(message);
}

function cmp(a: bigint, b: bigint): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function show(v: unknown): string {
  if (typeof v === 'bigint') return `${v}n`;
  if (typeof v === 'string') return JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}...` : v);
  if (v === null || v === undefined || typeof v === 'number' || typeof v === 'boolean') return String(v);
  return Array.isArray(v) ? 'an array' : `a ${typeof v}`;
}

function obj(v: unknown, where: string): Record<string, unknown> {
  // Plain maps only: msgpack maps decode to plain objects, and anything else
  // (Date, Buffer, msgpackr extension types) is not part of the schema.
  const proto = typeof v === 'object' && v !== null ? Object.getPrototypeOf(v) : undefined;
  if (typeof v !== 'object' || v === null || Array.isArray(v) || (proto !== Object.prototype && proto !== null)) {
    fail(`${where} is ${show(v)}, expected a map`);
  }
  return v as Record<string, unknown>;
}

function arr(v: unknown, where: string): unknown[] {
  if (!Array.isArray(v)) fail(`${where} is ${show(v)}, expected an array`);
  return v;
}

function str(v: unknown, where: string): string {
  if (typeof v !== 'string') fail(`${where} is ${show(v)}, expected a string`);
  return v;
}

function int(v: unknown, where: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v)) fail(`${where} is ${show(v)}, expected an integer`);
  if (v < min || v > max) fail(`${where} is ${v}, expected ${min}..${max}`);
  return v;
}

function bin(v: unknown, where: string, length: number): Uint8Array {
  if (!(v instanceof Uint8Array)) fail(`${where} is ${show(v)}, expected bytes`);
  if (v.length !== length) fail(`${where} has ${v.length} bytes, expected ${length}`);
  return v;
}

function big(v: unknown, where: string, min = 0n): bigint {
  if (typeof v !== 'bigint') fail(`${where} is ${show(v)}, expected a 64-bit integer (bigint)`);
  if (v < min || v >= U64_LIMIT) fail(`${where} is ${v}, expected ${min}..${U64_LIMIT - 1n}`);
  return v;
}
