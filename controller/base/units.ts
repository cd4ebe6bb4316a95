/** Sizes, addresses and durations as users type and read them. */
import { GpuckptError } from './errors.js';

const UNITS: Record<string, bigint> = { '': 1n, K: 1n << 10n, M: 1n << 20n, G: 1n << 30n, T: 1n << 40n };

/** "64G", "512M", "1048576", "0x1000" → bytes. Powers of 1024, like the shim. */
export function parseSize(text: string, what: string): bigint {
  const m = text.trim().match(/^(0x[0-9a-f]+|[0-9]+)\s*([kmgt]?)(?:i?b)?$/i);
  if (!m) throw new GpuckptError('BAD_ARGUMENT', `${what} "${text}" is not a size (examples: 64G, 512M, 1048576)`);
  const v = BigInt(m[1]!) * UNITS[m[2]!.toUpperCase()]!;
  if (v <= 0n || v >= 1n << 63n) throw new GpuckptError('BAD_ARGUMENT', `${what} "${text}" is out of range`);
  return v;
}

/** "0x600000000000" → address (hex or decimal). */
export function parseAddress(text: string, what: string): bigint {
  if (!/^(0x[0-9a-f]+|[0-9]+)$/i.test(text.trim()))
    throw new GpuckptError('BAD_ARGUMENT', `${what} "${text}" is not an address (example: 0x600000000000)`);
  const v = BigInt(text.trim());
  if (v <= 0n || v >= 1n << 57n) throw new GpuckptError('BAD_ARGUMENT', `${what} "${text}" is out of range`);
  return v;
}

export function hex(v: bigint | number): string {
  return '0x' + v.toString(16);
}

export function formatBytes(v: bigint | number): string {
  const n = Number(v);
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let x = n / 1024;
  let i = 0;
  while (x >= 1024 && i < units.length - 1) {
    x /= 1024;
    i++;
  }
  return `${x.toFixed(x < 10 ? 2 : 1)} ${units[i]}`;
}

export function seconds(ns: number | bigint): number {
  return Number(ns) / 1e9;
}

export function round(v: number, digits = 3): number {
  const f = 10 ** digits;
  return Math.round(v * f) / f;
}
