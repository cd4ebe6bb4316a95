// CRIU's image files as the fake CRIU and the tests write and read them:
// two magics, then u32-length-prefixed protobuf messages of varint fields
// and embedded messages, as CRIU 4.x lays them out. Written from that
// layout, not from controller/adapters/criu-image-file.ts, which they check.
import { readFileSync } from 'node:fs';

const COMMON = 0x54564319;

function varint(v, out) {
  v = BigInt(v);
  do {
    const low = Number(v & 0x7fn);
    v >>= 7n;
    out.push(v ? low | 0x80 : low);
  } while (v);
}

/** A message of [field, value | Buffer] in order: varints (Number or BigInt), embedded messages or bytes; undefined values are left out. */
export function message(fields) {
  const out = [];
  for (const [f, v] of fields) {
    if (v === undefined) continue;
    if (Buffer.isBuffer(v)) {
      varint((f << 3) | 2, out);
      varint(v.length, out);
      out.push(...v);
    } else {
      varint(f << 3, out);
      varint(v, out);
    }
  }
  return Buffer.from(out);
}

/** An image file: the magics, then each entry with its length. */
export function imageFile(magic, entries) {
  const parts = [Buffer.alloc(8)];
  parts[0].writeUInt32LE(COMMON, 0);
  parts[0].writeUInt32LE(magic, 4);
  for (const e of entries) {
    const len = Buffer.alloc(4);
    len.writeUInt32LE(e.length, 0);
    parts.push(len, e);
  }
  return Buffer.concat(parts);
}

/** A message's [field, value] pairs: BigInt varints, Buffers for length-delimited fields. */
export function* fields(b) {
  let at = 0;
  const v = () => {
    let x = 0n;
    for (let s = 0n; ; s += 7n) {
      const byte = b[at++];
      x |= BigInt(byte & 0x7f) << s;
      if (!(byte & 0x80)) return x;
    }
  };
  while (at < b.length) {
    const key = Number(v());
    if ((key & 7) === 2) {
      const n = Number(v());
      yield [key >> 3, b.subarray(at, (at += n))];
    } else yield [key >> 3, v()];
  }
}

/** The entries of the image file at path. */
export function entries(path) {
  const b = readFileSync(path);
  const out = [];
  for (let at = 8; at < b.length; at += 4 + b.readUInt32LE(at)) out.push(b.subarray(at + 4, at + 4 + b.readUInt32LE(at)));
  return out;
}
