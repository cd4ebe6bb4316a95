// The fake CRIU's files.img: the regular files the tree has open, encoded
// as CRIU 4.x does (two magics, then u32-length-prefixed protobuf
// file_entry messages with a reg_file_entry), so that gpuckpt's restore
// checks them as it checks a real image. Usage: node files-img.mjs DIR PID...
import { readdirSync, readFileSync, readlinkSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { imageFile, message } from './criu-image.mjs';

const [dir, ...pids] = process.argv.slice(2);
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
    const reg = message([[1, id], [2, flags], [3, 0], [5, Buffer.alloc(0)], [6, Buffer.from(path)], [8, checked ? statSync(path).size : undefined]]);
    entries.push(message([[1, 1], [2, id], [3, reg]]));
  }
}
writeFileSync(join(dir, 'files.img'), imageFile(0x56303138, entries));
