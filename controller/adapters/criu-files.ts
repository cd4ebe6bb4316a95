/**
 * The regular files a CRIU image reopens at restore, read from its
 * files.img, so that a restore can check them before anything runs: CRIU
 * refuses a file whose size changed since the dump ("File ... has bad
 * size"), unless it was open write-only for appending.
 *
 * files.img (CRIU 3.x and 4.x): two u32 magics, then entries of a u32
 * length and a protobuf `file_entry` (images/fdinfo.proto), whose field 3
 * is a `reg_file_entry` (images/regfile.proto): flags 2, pos 3, name 6,
 * size 8. Only those fields are decoded. A file remapped at dump (a deleted
 * one carried in the image, remap-fpath.img) is restored from the image,
 * not reopened, so it is left out.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { GpuckptError } from '../base/errors.js';

const IMG_COMMON_MAGIC = 0x54564319;
const FILES_MAGIC = 0x56303138;
const REMAP_FPATH_MAGIC = 0x59133954;
const FD_TYPE_REG = 1;

export interface CriuRegularFile {
  /** Absolute path, as CRIU recorded it. */
  path: string;
  /** open(2) flags. */
  flags: number;
  /** The size CRIU will insist on; undefined when it checks none (write-only, appending). */
  size?: bigint;
}

/** Protobuf wire reading: just what files.img needs. */
class Fields {
  private at = 0;
  constructor(private readonly b: Uint8Array) {}

  /** Each field's number with its varint value or its bytes. */
  *each(): Generator<{ field: number; value?: bigint; bytes?: Uint8Array }> {
    while (this.at < this.b.length) {
      const key = Number(this.varint());
      const field = key >>> 3;
      switch (key & 7) {
        case 0:
          yield { field, value: this.varint() };
          break;
        case 1:
          this.skip(8);
          break;
        case 2: {
          const len = Number(this.varint());
          yield { field, bytes: this.take(len) };
          break;
        }
        case 5:
          this.skip(4);
          break;
        default:
          throw new Error(`wire type ${key & 7}`);
      }
    }
  }

  private varint(): bigint {
    let v = 0n;
    for (let shift = 0n; ; shift += 7n) {
      if (this.at >= this.b.length || shift > 63n) throw new Error('truncated varint');
      const byte = this.b[this.at++]!;
      v |= BigInt(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return v;
    }
  }

  private take(n: number): Uint8Array {
    if (this.at + n > this.b.length) throw new Error('truncated field');
    const out = this.b.subarray(this.at, this.at + n);
    this.at += n;
    return out;
  }

  private skip(n: number): void {
    this.take(n);
  }
}

function regularFile(bytes: Uint8Array): CriuRegularFile | undefined {
  let path: string | undefined;
  let flags = 0;
  let size: bigint | undefined;
  for (const f of new Fields(bytes).each()) {
    if (f.field === 2 && f.value !== undefined) flags = Number(f.value);
    else if (f.field === 6 && f.bytes) path = Buffer.from(f.bytes).toString('utf8');
    else if (f.field === 8 && f.value !== undefined) size = f.value;
  }
  return path === undefined ? undefined : { path, flags, size };
}

/** The entries of a CRIU image file (with magic), or none when it is absent and optional. */
function entries(dir: string, name: string, magic: number, optional: boolean): Uint8Array[] {
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
    const entry = b.subarray(at + 4, at + 4 + len);
    if (len < 0 || entry.length !== len) throw new GpuckptError('IMAGE_CORRUPT', `${file}: truncated entry at byte ${at}`);
    out.push(entry);
    at += 4 + len;
  }
  return out;
}

function decode<T>(dir: string, name: string, read: () => T): T {
  try {
    return read();
  } catch (e) {
    if (e instanceof GpuckptError) throw e;
    throw new GpuckptError('IMAGE_CORRUPT', `${join(dir, name)}: ${(e as Error).message}`);
  }
}

/** The regular files of the CRIU image in dir that CRIU reopens by path. */
export function criuRegularFiles(dir: string): CriuRegularFile[] {
  const remapped = decode(dir, 'remap-fpath.img', () => {
    const ids = new Set<number>();
    for (const e of entries(dir, 'remap-fpath.img', REMAP_FPATH_MAGIC, true))
      for (const f of new Fields(e).each()) if (f.field === 1 && f.value !== undefined) ids.add(Number(f.value));
    return ids;
  });
  return decode(dir, 'files.img', () => {
    const out: CriuRegularFile[] = [];
    for (const e of entries(dir, 'files.img', FILES_MAGIC, false)) {
      let type = -1;
      let id = -1;
      let reg: Uint8Array | undefined;
      for (const f of new Fields(e).each()) {
        if (f.field === 1 && f.value !== undefined) type = Number(f.value);
        else if (f.field === 2 && f.value !== undefined) id = Number(f.value);
        else if (f.field === 3 && f.bytes) reg = f.bytes;
      }
      const r = type === FD_TYPE_REG && reg && !remapped.has(id) ? regularFile(reg) : undefined;
      if (r) out.push(r);
    }
    return out;
  });
}
