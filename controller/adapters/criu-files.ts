/**
 * The regular files a CRIU image reopens at restore, read from its
 * files.img, so that a restore can check them before anything runs: CRIU
 * refuses a file whose size changed since the dump ("File ... has bad
 * size"), unless it was open write-only for appending.
 *
 * files.img (criu-image-file.ts) holds protobuf `file_entry`s
 * (images/fdinfo.proto), whose field 3 is a `reg_file_entry`
 * (images/regfile.proto): flags 2, pos 3, name 6, size 8. Only those
 * fields are decoded. A file remapped at dump (a deleted
 * one carried in the image, remap-fpath.img) is restored from the image,
 * not reopened, so it is left out.
 */
import { criuEntries, decodeCriu, protoFields } from './criu-image-file.js';

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

function regularFile(bytes: Uint8Array): CriuRegularFile | undefined {
  let path: string | undefined;
  let flags = 0;
  let size: bigint | undefined;
  for (const f of protoFields(bytes)) {
    if (f.field === 2 && f.value !== undefined) flags = Number(f.value);
    else if (f.field === 6 && f.bytes) path = Buffer.from(f.bytes).toString('utf8');
    else if (f.field === 8 && f.value !== undefined) size = BigInt(f.value);
  }
  return path === undefined ? undefined : { path, flags, size };
}

/** The regular files of the CRIU image in dir that CRIU reopens by path. */
export function criuRegularFiles(dir: string): CriuRegularFile[] {
  const remapped = decodeCriu(dir, 'remap-fpath.img', () => {
    const ids = new Set<number>();
    for (const e of criuEntries(dir, 'remap-fpath.img', REMAP_FPATH_MAGIC, true))
      for (const f of protoFields(e)) if (f.field === 1 && f.value !== undefined) ids.add(Number(f.value));
    return ids;
  });
  return decodeCriu(dir, 'files.img', () => {
    const out: CriuRegularFile[] = [];
    for (const e of criuEntries(dir, 'files.img', FILES_MAGIC, false)) {
      let type = -1;
      let id = -1;
      let reg: Uint8Array | undefined;
      for (const f of protoFields(e)) {
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
