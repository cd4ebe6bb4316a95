/**
 * Byte planes of a frame (format version 3, FrameRecord.planes): float
 * data (weights, optimizer state) compresses to 9-12 % fewer bytes with byte k of
 * every element together (measured on trained state:
 * test/gpu/probes/shuffle.mjs), other data does not; each frame is judged
 * on a sample of it. GPUCKPT_SHUFFLE=auto (default), off, or 2 / 4 to
 * force that element size.
 *
 * Planes go into zstd with the smallest hash table it takes (PLANES_TUNING):
 * a float's sign and exponent bytes are packed by their literals' Huffman
 * code more than by matches, and zstd -1's table found short matches that
 * cost time and bytes (16 MiB of fp32 or bf16 weights on the build machine:
 * 2-2.8x faster, 1-2 % smaller; test/gpu/probes/shuffle.mjs measures it on
 * trained state). Each plane is a zstd frame of its own (format 5), and a
 * plane whose sample does not compress (a float's low mantissa bytes) is
 * stored as it is: zstd's time goes to the planes that pay for it.
 */
import { native } from '../../native/index.js';
import { compressedLength, type FrameTuning } from './frame-codec.js';
import { planeParts, storedFrameBound } from './format.js';

/** How a frame's raw bytes go into zstd: as they are (0), or as byte planes of 2- or 4-byte elements. */
export type Planes = 0 | 2 | 4;
/** A frame's layout: its planes, and which of them (bit k: plane k) are stored rather than compressed. */
export interface FrameLayout {
  planes: Planes;
  stored: number;
}
/** auto: byte planes where a sample of the frame compresses at least 3 % smaller so (GPUCKPT_SHUFFLE). */
export type PlanesMode = 'auto' | 'off' | 2 | 4;

export function planesMode(setting: string | undefined): PlanesMode {
  return setting === 'off' ? 'off' : setting === '2' ? 2 : setting === '4' ? 4 : 'auto';
}

/** zstd's parameters for frames of planes: ZSTD_HASHLOG_MIN. */
export const PLANES_TUNING: FrameTuning = { hashLog: 6 };
/** A plane whose sample compresses to more than this share of its length is stored as it is. */
const STORE_ABOVE = 0.98;

const SAMPLES = 4;
const SAMPLE_BYTES = 64 * 1024;
let sample = new Uint8Array(0);
let sampleOut = new Uint8Array(0);

/**
 * The layout a frame compresses best in, judged on four 64 KiB pieces
 * spread over it (weights and optimizer state: planes of 4 or 2, the low
 * mantissa planes stored; other data: as it is), at the frame's level.
 * size forces planes of that size, judging only which to store.
 */
export function chooseLayout(raw: Uint8Array, level: number, size?: 2 | 4): FrameLayout {
  let n = raw.length;
  if (n > SAMPLES * SAMPLE_BYTES) {
    n = SAMPLES * SAMPLE_BYTES;
    if (sample.length < n) sample = new Uint8Array(n);
    const step = Math.floor((raw.length - SAMPLE_BYTES) / (SAMPLES - 1) / 4) * 4;
    for (let i = 0; i < SAMPLES; i++) sample.set(raw.subarray(i * step, i * step + SAMPLE_BYTES), i * SAMPLE_BYTES);
  }
  const piece = n === raw.length ? raw : sample.subarray(0, n);
  if (sampleOut.length < n) sampleOut = new Uint8Array(n);
  const out = sampleOut.subarray(0, n);
  let best: FrameLayout = { planes: 0, stored: 0 };
  let bestSize = size ? Infinity : compressedLength(piece, level) * 0.97;
  for (const p of size ? [size] : ([4, 2] as const)) {
    native().byteplanes(piece, out, p, false);
    let bytes = 0;
    let stored = 0;
    planeParts(n, p).forEach(([a, b], k) => {
      const compressed = compressedLength(out.subarray(a, b), level, PLANES_TUNING);
      if (compressed > (b - a) * STORE_ABOVE) stored |= 1 << k;
      bytes += Math.min(compressed, storedFrameBound(b - a));
    });
    if (bytes < bestSize) [best, bestSize] = [{ planes: p, stored }, bytes];
  }
  return best;
}

/** raw as byte planes of planes-byte elements, in into (as long as raw). */
export function toPlanes(raw: Uint8Array, planes: 2 | 4, into: Uint8Array): Uint8Array {
  native().byteplanes(raw, into, planes, false);
  return into;
}

/** Byte planes back into elements, from src into into. */
export function fromPlanes(src: Uint8Array, planes: 2 | 4, into: Uint8Array): void {
  native().byteplanes(src, into, planes, true);
}
