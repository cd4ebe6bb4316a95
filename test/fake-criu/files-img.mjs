// The fake CRIU's files.img: the regular files the tree has open, encoded
// as CRIU 4.x does (two magics, then u32-length-prefixed protobuf
// file_entry messages with a reg_file_entry), so that gpuckpt's restore
// checks them as it checks a real image. Usage: node files-img.mjs DIR PID...
import { readdirSync, readFileSync, readlinkSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const [dir, ...pids] = process.argv.slice(2);
const varint = (n) => {
  const out = [];
  let v = BigInt(n);
  do {
    let b = Number(v & 0x7fn);
    v >>= 7n;
    if (v) b |= 0x80;
    out.push(b);
  } while (v);
  return Buffer.from(out);
};
const field = (num, wire, body) => Buffer.concat([varint((num << 3) | wire), ...(wire === 2 ? [varint(body.length), body] : [body])]);
const O_WRONLY = 1;
const O_APPEND = 0o2000;

const entries = [];
const seen = new Set();
for (const pid of pids) {
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    let path;
    let flags;
    try {
      path = readlinkSync(`/proc/${pid}/fd/${fd}`);
      flags = parseInt(readFileSync(`/proc/${pid}/fdinfo/${fd}`, 'utf8').match(/^flags:\s*([0-7]+)/m)[1], 8);
      if (!path.startsWith('/') || path.endsWith(' (deleted)') || !statSync(path).isFile() || seen.has(path)) continue;
    } catch {
      continue;
    }
    seen.add(path);
    const id = entries.length + 1;
    const checked = !((flags & 3) === O_WRONLY && flags & O_APPEND);
    const reg = Buffer.concat([
      field(1, 0, varint(id)),
      field(2, 0, varint(flags)),
      field(3, 0, varint(0)),
      field(5, 2, Buffer.alloc(0)),
      field(6, 2, Buffer.from(path)),
      ...(checked ? [field(8, 0, varint(statSync(path).size))] : []),
    ]);
    const entry = Buffer.concat([field(1, 0, varint(1)), field(2, 0, varint(id)), field(3, 2, reg)]);
    const len = Buffer.alloc(4);
    len.writeUInt32LE(entry.length);
    entries.push(len, entry);
  }
}
const head = Buffer.alloc(8);
head.writeUInt32LE(0x54564319, 0);
head.writeUInt32LE(0x56303138, 4);
writeFileSync(join(dir, 'files.img'), Buffer.concat([head, ...entries]));
