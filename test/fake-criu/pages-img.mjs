// The fake CRIU's page images: `dump DIR N` writes pages-1.img .. pages-N.img
// as CRIU lays them out (whole 4 KiB pages: patterned, random and zero ones;
// the first over one 4 MiB frame) and their SHA-256 in DIR/fake-criu-pages.json;
// `check DIR` proves the files there are the same bytes (exit 1 and a CRIU-like
// error line if not), as a restore from an image gpuckpt repacked must see.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const [mode, dir, count] = process.argv.slice(2);
const PAGE = 4096;
const sha = (b) => createHash('sha256').update(b).digest('hex');

if (mode === 'dump') {
  const sums = {};
  for (let i = 1; i <= Number(count); i++) {
    const pages = i === 1 ? 1024 + 3 : 40 + 7 * i;
    const buf = Buffer.alloc(pages * PAGE);
    let x = 0x9e3779b9 ^ i;
    for (let p = 0; p < pages; p++) {
      const page = buf.subarray(p * PAGE, (p + 1) * PAGE);
      if (p % 3 === 0) continue; // zero
      if (p % 3 === 1) page.fill(p & 0xff);
      else
        for (let k = 0; k < PAGE; k += 4) {
          x ^= x << 13;
          x ^= x >>> 17;
          x ^= x << 5;
          page.writeInt32LE(x | 0, k);
        }
    }
    writeFileSync(join(dir, `pages-${i}.img`), buf);
    sums[`pages-${i}.img`] = sha(buf);
  }
  writeFileSync(join(dir, 'fake-criu-pages.json'), JSON.stringify(sums));
} else if (mode === 'check' && existsSync(join(dir, 'fake-criu-pages.json'))) {
  // (An image real CRIU made, restored by the fake one in a GPU test, has no sums.)
  const sums = JSON.parse(readFileSync(join(dir, 'fake-criu-pages.json'), 'utf8'));
  for (const [name, sum] of Object.entries(sums)) {
    const path = join(dir, name);
    if (!existsSync(path) || sha(readFileSync(path)) !== sum) {
      console.log(`(00.100000) Error (criu/pagemap.c:500): fake-criu: ${name} ${existsSync(path) ? 'differs from what was dumped' : 'is missing'}`);
      process.exit(1);
    }
  }
}
