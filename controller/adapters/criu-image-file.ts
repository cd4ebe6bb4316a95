/**
 * CRIU's image files (CRIU 3.x and 4.x): two u32 magics (the common one,
 * then the file's own), then entries of a u32 length and a protobuf
 * message. Just the wire format: what criu-files.ts and criu-memory.ts
 * decode of it, and the entries criu-memory.ts writes back.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { GpuckptError } from '../base/errors.js';

const IMG_COMMON_MAGIC = 0x54564319;

/** One field of a protobuf message: its number, with its varint value (a number where exact, below 2^53; a bigint above) or its bytes. */
export interface ProtoField {
  field: number;
  value?: number | bigint;
  bytes?: Uint8Array;
}

/** The fields of one protobuf message, in the order written (fixed-width ones skipped). */
export function* protoFields(b: Uint8Array): Generator<ProtoField> {
  let at = 0;
  // In Number arithmetic up to 7 bytes (49 bits), BigInt's only beyond: a
  // BigInt per byte made a restore's plan mostly garbage collection.
  const varint = (): number | bigint => {
    let v = 0;
    let scale = 1;
    for (let i = 0; i < 7; i++, scale *= 0x80) {
      if (at >= b.length) throw new Error('truncated varint');
      const byte = b[at++]!;
      v += (byte & 0x7f) * scale;
      if (!(byte & 0x80)) return v;
    }
    let big = BigInt(v);
    for (let shift = 49n; ; shift += 7n) {
      if (at >= b.length || shift > 63n) throw new Error('truncated varint');
      const byte = b[at++]!;
      big |= BigInt(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return big <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(big) : big;
    }
  };
  const take = (n: number): Uint8Array => {
    if (at + n > b.length) throw new Error('truncated field');
    at += n;
    return b.subarray(at - n, at);
  };
  while (at < b.length) {
    const key = Number(varint());
    const field = key >>> 3;
    switch (key & 7) {
      case 0:
        yield { field, value: varint() };
        break;
      case 1:
        take(8);
        break;
      case 2:
        yield { field, bytes: take(Number(varint())) };
        break;
      case 5:
        take(4);
        break;
      default:
        throw new Error(`wire type ${key & 7}`);
    }
  }
}

/** The entries of a CRIU image file (with magic), or none when it is absent and optional. */
export function criuEntries(dir: string, name: string, magic: number, optional: boolean): Uint8Array[] {
  const file = join(dir, name);
  let b: Buffer;
  try {
    b = readFileSync(file);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (optional && code === 'ENOENT') return [];
    throw new GpuckptError('IMAGE_CORRUPT', `${file}: cannot read it (${code ?? (e as Error).message})`);
  }
  const out: Uint8Array[] = [];
  if (b.length < 8 || b.readUInt32LE(0) !== IMG_COMMON_MAGIC || b.readUInt32LE(4) !== magic) throw new GpuckptError('IMAGE_CORRUPT', `${file}: not the CRIU image it should be`);
  for (let at = 8; at < b.length; ) {
    const len = at + 4 <= b.length ? b.readUInt32LE(at) : -1;
    if (len < 0 || at + 4 + len > b.length) throw new GpuckptError('IMAGE_CORRUPT', `${file}: truncated entry at byte ${at}`);
    out.push(new Uint8Array(b.buffer, b.byteOffset + at + 4, len)); // not b.subarray: a Buffer each cost more than decoding it
    at += 4 + len;
  }
  return out;
}

/**
 * A CRIU image of messages of varint fields only, into one growing buffer:
 * write calls put(field, value) for each field of a message in order, then
 * end() after each message. Values are Numbers (exact below 2^53, and
 * page-aligned addresses beyond). A Buffer per message was most of the
 * cost of writing a pagemap back.
 */
export function varintMessagesImage(magic: number, write: (put: (field: number, value: number) => void, end: () => void) => void): Buffer {
  let out = Buffer.allocUnsafe(1 << 16);
  let at = 12; // the magics, then the first message's length
  let start = 8;
  const room = (n: number) => {
    if (at + n <= out.length) return;
    const grown = Buffer.allocUnsafe(Math.max(out.length * 2, at + n));
    out.copy(grown, 0, 0, at);
    out = grown;
  };
  const varint = (v: number) => {
    for (; v >= 0x80; v = Math.floor(v / 0x80)) out[at++] = (v % 0x80) | 0x80;
    out[at++] = v;
  };
  write(
    (field, value) => {
      room(22);
      varint(field * 8);
      varint(value);
    },
    () => {
      out.writeUInt32LE(at - start - 4, start);
      room(4);
      start = at;
      at += 4;
    },
  );
  out.writeUInt32LE(IMG_COMMON_MAGIC, 0);
  out.writeUInt32LE(magic, 4);
  return out.subarray(0, start);
}

/** read(), its decoding failures (a message too short, a bad wire type) reported as IMAGE_CORRUPT naming the file. */
export function decodeCriu<T>(dir: string, name: string, read: () => T): T {
  try {
    return read();
  } catch (e) {
    if (e instanceof GpuckptError) throw e;
    throw new GpuckptError('IMAGE_CORRUPT', `${join(dir, name)}: ${(e as Error).message}`);
  }
}
