/**
 * Bytes of device memory as typed values and back (gpuckpt peek and
 * poke): little-endian, as the GPU stores them.
 */
import { GpuckptError } from './errors.js';

export const ELEMENT_FORMATS = ['hex', 'u8', 'i8', 'u16', 'i16', 'u32', 'i32', 'u64', 'i64', 'f16', 'bf16', 'f32', 'f64'] as const;
export type ElementFormat = (typeof ELEMENT_FORMATS)[number];

export function parseElementFormat(text: string): ElementFormat {
  if (!(ELEMENT_FORMATS as readonly string[]).includes(text)) throw new GpuckptError('BAD_ARGUMENT', `--format "${text}" must be one of ${ELEMENT_FORMATS.join(', ')}`);
  return text as ElementFormat;
}

/** Bytes per element (hex: 1). */
export function elementSize(f: ElementFormat): number {
  return f === 'hex' ? 1 : f.endsWith('64') ? 8 : f.endsWith('32') ? 4 : f.endsWith('16') ? 2 : 1;
}

function halfToNumber(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

function numberToHalf(v: number): number {
  const f32 = new DataView(new ArrayBuffer(4));
  f32.setFloat32(0, v, true);
  const x = f32.getUint32(0, true);
  const sign = (x >>> 16) & 0x8000;
  const exp = ((x >>> 23) & 0xff) - 127 + 15;
  const mant = x & 0x7fffff;
  if (((x >>> 23) & 0xff) === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  if (exp >= 31) return sign | 0x7c00;
  if (exp <= 0) {
    if (exp < -10) return sign;
    const m = (mant | 0x800000) >>> (1 - exp);
    return sign | ((m + 0x1000) >>> 13);
  }
  const half = sign | (exp << 10) | (mant >>> 13);
  return mant & 0x1000 ? half + 1 : half; // round to nearest
}

/** The values in bytes (its length a multiple of the element size); 64-bit integers as strings, exactly. */
export function decodeElements(bytes: Uint8Array, f: ElementFormat): (number | string)[] {
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const size = elementSize(f);
  const out: (number | string)[] = [];
  for (let at = 0; at + size <= bytes.byteLength; at += size) {
    switch (f) {
      case 'hex':
      case 'u8':
        out.push(v.getUint8(at));
        break;
      case 'i8':
        out.push(v.getInt8(at));
        break;
      case 'u16':
        out.push(v.getUint16(at, true));
        break;
      case 'i16':
        out.push(v.getInt16(at, true));
        break;
      case 'u32':
        out.push(v.getUint32(at, true));
        break;
      case 'i32':
        out.push(v.getInt32(at, true));
        break;
      case 'u64':
        out.push(v.getBigUint64(at, true).toString());
        break;
      case 'i64':
        out.push(v.getBigInt64(at, true).toString());
        break;
      case 'f16':
        out.push(halfToNumber(v.getUint16(at, true)));
        break;
      case 'bf16':
        out.push(new DataView(new Uint32Array([v.getUint16(at, true) << 16]).buffer).getFloat32(0, true));
        break;
      case 'f32':
        out.push(v.getFloat32(at, true));
        break;
      case 'f64':
        out.push(v.getFloat64(at, true));
        break;
    }
  }
  return out;
}

/** Bytes from values as the command line gives them: hex, one string of hex digits (spaces allowed); else one value each. */
export function encodeElements(values: string[], f: ElementFormat): Buffer {
  if (f === 'hex') {
    const digits = values
      .flatMap((v) => v.trim().split(/\s+/))
      .map((v) => v.replace(/^0x/i, ''))
      .join('');
    if (!digits || digits.length % 2 || !/^[0-9a-f]+$/i.test(digits)) throw new GpuckptError('BAD_ARGUMENT', `"${values.join(' ')}" is not bytes in hex (an even number of hex digits)`);
    return Buffer.from(digits, 'hex');
  }
  const size = elementSize(f);
  const out = Buffer.alloc(values.length * size);
  values.forEach((text, i) => {
    const bad = (why: string): never => {
      throw new GpuckptError('BAD_ARGUMENT', `"${text}" is not a value of ${f}: ${why}`);
    };
    const at = i * size;
    if (f.startsWith('f') || f === 'bf16') {
      const x = Number(text);
      if (text.trim() === '' || (Number.isNaN(x) && text.trim().toLowerCase() !== 'nan')) bad('not a number');
      if (f === 'f64') out.writeDoubleLE(x, at);
      else if (f === 'f32') out.writeFloatLE(x, at);
      else if (f === 'f16') out.writeUInt16LE(numberToHalf(x), at);
      else {
        // The upper half of the float32, rounded to nearest even.
        const b = Buffer.alloc(4);
        b.writeFloatLE(x, 0);
        const u = b.readUInt32LE(0);
        out.writeUInt16LE(Number.isNaN(x) ? 0x7fc0 : ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff, at);
      }
      return;
    }
    if (text.trim() === '') bad('empty');
    let n: bigint;
    try {
      n = BigInt(text.trim());
    } catch {
      return bad('not a whole number');
    }
    const bits = BigInt(size * 8);
    const signed = f.startsWith('i');
    const lo = signed ? -(1n << (bits - 1n)) : 0n;
    const hi = signed ? (1n << (bits - 1n)) - 1n : (1n << bits) - 1n;
    if (n < lo || n > hi) bad(`out of range ${lo}..${hi}`);
    const u = n < 0n ? n + (1n << bits) : n;
    for (let k = 0; k < size; k++) out[at + k] = Number((u >> BigInt(8 * k)) & 0xffn);
  });
  return out;
}
