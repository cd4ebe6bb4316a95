/**
 * Compression of one frame of pool data (one piece of one allocation) into
 * self-contained zstd frames, and the checked inverse: one zstd frame, or
 * for byte planes one per plane (format 5), a plane that would not compress
 * stored in raw blocks (native storedZstdFrame) rather than run through
 * zstd's compressor.
 *
 * Every frame carries zstd's content checksum (XXH64 of the raw bytes) and its
 * content size, so decompression alone proves the bytes are what was saved:
 * restore must never write silently damaged memory into a GPU.
 *
 * Both directions keep their zstd contexts in module state (compression: one
 * per level and parameters in use). Module state is per thread (each
 * worker_thread loads its own copy of this module and of the native addon's
 * context objects), so this is safe in workers and avoids a context
 * allocation per frame.
 */
import { createRequire } from 'node:module';
import type zstdBinding from 'zstd-napi/binding.js';
import { GpuckptError } from '../base/errors.js';
import { native } from '../../native/index.js';
import { planeParts, storedFrameBound } from './format.js';

type Zstd = typeof zstdBinding;
let binding: Zstd | undefined;

/**
 * zstd's binding, loaded at the first frame: the main thread of most
 * commands never codes one (20 ms of its start). A codec worker loads it
 * as it starts (loadZstd), not in its first frame.
 */
function zstd(): Zstd {
  return (binding ??= createRequire(import.meta.url)('zstd-napi/binding.js') as Zstd);
}

export function loadZstd(): void {
  zstd();
}

/** zstd frame magic 0xFD2FB528, little-endian on disk. */
const ZSTD_MAGIC = 0xfd2fb528;
/** Frame_Header_Descriptor bit 2: a 4-byte content checksum ends the frame. */
const CHECKSUM_FLAG_BIT = 0x04;

/** zstd's parameters beside the level that a frame may set (byte-planes.ts does). */
export interface FrameTuning {
  hashLog?: number;
}

const cctxs = new Map<string, InstanceType<Zstd['CCtx']>>();
let dctx: InstanceType<Zstd['DCtx']> | undefined;
/** Where compressedLength compresses (a sample's worth, grown as needed). */
let lengthScratch = new Uint8Array(0);

function cctxFor(level: number, tuning: FrameTuning): InstanceType<Zstd['CCtx']> {
  const key = `${level} ${tuning.hashLog ?? ''}`;
  let cctx = cctxs.get(key);
  if (!cctx) {
    const z = zstd();
    cctx = new z.CCtx();
    cctx.setParameter(z.CParameter.compressionLevel, level);
    cctx.setParameter(z.CParameter.checksumFlag, 1);
    cctx.setParameter(z.CParameter.contentSizeFlag, 1);
    if (tuning.hashLog !== undefined) cctx.setParameter(z.CParameter.hashLog, tuning.hashLog);
    cctxs.set(key, cctx);
  }
  return cctx;
}

/**
 * Compress `raw` as one zstd frame with content checksum and content size,
 * into an ArrayBuffer of its own that a worker hands over whole. A frame
 * near zstd's bound views the start of that bound, uncopied (the copy cost
 * 3-7 ms of a 16 MiB frame of planes' 20-26 on the build machine); a
 * smaller one is copied into memory of its length, cheap to copy and
 * lighter to hold while it waits for the disk.
 */
export function compressFrame(raw: Uint8Array, level = 1, tuning: FrameTuning = {}): Uint8Array {
  const out = new Uint8Array(zstd().compressBound(raw.length));
  return handedOver(out, cctxFor(level, tuning).compress2(out, raw));
}

/** The first n bytes of out as a frame is handed over: a view near the bound, else copied to its length (compressFrame says why). */
function handedOver(out: Uint8Array, n: number): Uint8Array {
  return n < out.length * 0.75 ? out.slice(0, n) : out.subarray(0, n);
}

/**
 * The byte planes of a frame (planes: equal parts, the last one taking
 * what is left of a partial element) as one zstd frame per plane, end to
 * end: compressed with tuning, or stored as they are where bit k of stored
 * says so. Per plane, zstd spent 20-30 % less time on a 16 MiB frame of
 * fp32 planes than on one frame of them, and a stored plane costs a copy
 * and a checksum instead of zstd's 2.5-3 ms per 4 MiB (build machine).
 */
export function compressPlanes(planes: Uint8Array, size: 2 | 4, stored: number, level = 1, tuning: FrameTuning = {}): Uint8Array {
  const parts = planeParts(planes.length, size);
  const out = new Uint8Array(parts.reduce((s, [a, b], k) => s + (stored & (1 << k) ? storedFrameBound(b - a) : zstd().compressBound(b - a)), 0));
  let n = 0;
  parts.forEach(([a, b], k) => {
    const into = out.subarray(n);
    n += stored & (1 << k) ? native().storedZstdFrame(planes.subarray(a, b), into) : cctxFor(level, tuning).compress2(into, planes.subarray(a, b));
  });
  return handedOver(out, n);
}

/** The length of compressFrame(raw, level, tuning), into memory it reuses (a sample, judged by its size). */
export function compressedLength(raw: Uint8Array, level = 1, tuning: FrameTuning = {}): number {
  const bound = zstd().compressBound(raw.length);
  if (lengthScratch.length < bound) lengthScratch = new Uint8Array(bound);
  return cctxFor(level, tuning).compress2(lengthScratch, raw);
}

/**
 * Decompress what compressFrame or compressPlanes wrote and prove it
 * intact: zstd frames end to end, each with a checksum and its content
 * size, together declaring and producing `expectedLength` bytes. `what`
 * names the frame in the error (e.g. "frame 3 (device 0, 0x...)"). Any
 * failure is IMAGE_DATA_CORRUPT. With `into` (exactly expectedLength
 * bytes) the frame is decompressed there, with no buffer of its own: on a
 * failure `into` holds part of the frame, which the caller must not use.
 */
export function decompressFrame(compressed: Uint8Array, expectedLength: number, what: string): Buffer;
export function decompressFrame(compressed: Uint8Array, expectedLength: number, what: string, into: Uint8Array): Uint8Array;
export function decompressFrame(compressed: Uint8Array, expectedLength: number, what: string, into?: Uint8Array): Uint8Array {
  const corrupt = (why: string, cause?: unknown): GpuckptError =>
    new GpuckptError('IMAGE_DATA_CORRUPT', `image data is corrupt: ${what}: ${why}`, { cause });

  // Each zstd frame is checked before it is decompressed: a frame without a
  // checksum would decode damaged data without complaint, and a wrong
  // declared size must not drive the output.
  const frames: { at: number; length: number; declared: number }[] = [];
  let total = 0;
  for (let at = 0; at < compressed.length || !frames.length; ) {
    const frame = compressed.subarray(at);
    if (frame.length < 6 || Buffer.from(frame.buffer, frame.byteOffset, 4).readUInt32LE(0) !== ZSTD_MAGIC) throw corrupt('not a zstd frame');
    if ((frame[4]! & CHECKSUM_FLAG_BIT) === 0) throw corrupt('zstd frame has no content checksum');
    let declared: number | null;
    let length: number;
    try {
      declared = zstd().getFrameContentSize(frame);
      length = zstd().findFrameCompressedSize(frame);
    } catch (e) {
      throw corrupt(`bad zstd frame (${(e as Error).message})`, e);
    }
    if (declared === null || total + declared > expectedLength) {
      throw corrupt(`zstd frame declares ${declared ?? 'no'} content bytes, expected ${expectedLength - total}${frames.length ? ' more' : ''}`);
    }
    frames.push({ at, length, declared });
    total += declared;
    at += length;
  }
  if (total !== expectedLength) throw corrupt(`zstd frames declare ${total} content bytes, expected ${expectedLength}`);

  dctx ??= new (zstd().DCtx)();
  if (into && into.length !== expectedLength) throw new GpuckptError('INTERNAL', `decompressing ${what}: a ${into.length}-byte destination for ${expectedLength} bytes`);
  const out = into ?? Buffer.allocUnsafe(expectedLength);
  let produced = 0;
  for (const f of frames) {
    let n: number;
    try {
      n = dctx.decompress(out.subarray(produced, produced + f.declared), compressed.subarray(f.at, f.at + f.length));
    } catch (e) {
      // e.g. "Restored data doesn't match checksum", "Corrupted block detected".
      throw corrupt((e as Error).message, e);
    }
    if (n !== f.declared) throw corrupt(`decompressed to ${produced + n} bytes, expected ${expectedLength}`);
    produced += n;
  }
  return out;
}
