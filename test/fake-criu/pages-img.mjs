// The fake CRIU's memory images: `dump DIR PID...` writes, for the i-th
// process, pages-i.img with pagemap-PID.img and mm-PID.img as CRIU lays them
// out (whole 4 KiB pages, patterned, random and zero ones, the first
// process's over one 4 MiB frame; private anonymous mappings, a heap (the
// first process's all zero), and a private file mapping, whose zero pages
// are not zeros if left out), and in
// DIR/fake-criu-pages.json the SHA-256 of each process's memory: every page
// its pagemap names, with its address. `check DIR` rebuilds that memory from
// the files there as CRIU would (a page the pagemap leaves out of a private
// anonymous mapping reads as zeros; out of any other, it is lost) and exits
// 1 with a CRIU-like error line if it differs, as a restore from an image
// gpuckpt repacked must not.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { entries, fields, imageFile, message } from './criu-image.mjs';

const [mode, dir, ...pids] = process.argv.slice(2);
const PAGE = 4096;
const PAGEMAP = 0x56084025;
const MM = 0x57492820;
const PE_LAZY = 2;
const PE_PRESENT = 4;

/** Process i's mappings: [start, pages, status] (REGULAR|ANON_PRIVATE, REGULAR|FILE_PRIVATE, REGULAR|HEAP|ANON_PRIVATE). */
function mappings(i) {
  const pages = i === 1 ? 1024 + 3 : 40 + 7 * i;
  const a = Math.floor(pages / 2);
  const b = Math.floor(pages / 4);
  return [
    [0x10000000n, a + 5, 0x201],
    [0x20000000n, b, 0x41],
    [0x30000000n, pages - a - b, 0x221],
  ];
}

const memorySum = (pages) => {
  const h = createHash('sha256');
  for (const [vaddr, bytes] of pages) h.update(`${vaddr.toString(16)}:`).update(bytes);
  return h.digest('hex');
};

if (mode === 'dump') {
  const sums = {};
  pids.forEach((pid, k) => {
    const i = k + 1;
    const maps = mappings(i);
    // The pagemap: the first mapping in two runs around 5 pages never touched, the others whole.
    const [a, b, c] = maps;
    const half = Math.floor((a[1] - 5) / 2);
    const runs = [
      [a[0], half],
      [a[0] + BigInt((half + 5) * PAGE), a[1] - 5 - half],
      [b[0], b[1]],
      [c[0], c[1]],
    ];
    const total = runs.reduce((n, r) => n + r[1], 0);
    const buf = Buffer.alloc(total * PAGE);
    let x = 0x9e3779b9 ^ i;
    for (let p = 0; p < total; p++) {
      const page = buf.subarray(p * PAGE, (p + 1) * PAGE);
      if (p % 3 === 0 || (i === 1 && p >= total - c[1])) continue; // zero (the first process's heap all zero: a frame with no page kept)
      if (p % 3 === 1) page.fill(p & 0xff);
      else
        for (let q = 0; q < PAGE; q += 4) {
          x ^= x << 13;
          x ^= x >>> 17;
          x ^= x << 5;
          page.writeInt32LE(x | 0, q);
        }
    }
    writeFileSync(join(dir, `pages-${i}.img`), buf);
    // As CRIU marks them: private anonymous pages PE_LAZY too (a lazy restore may fetch them).
    const flags = (v) => (v === b[0] ? PE_PRESENT : PE_PRESENT | PE_LAZY);
    writeFileSync(join(dir, `pagemap-${pid}.img`), imageFile(PAGEMAP, [message([[1, i]]), ...runs.map(([v, n]) => message([[1, v], [2, 0], [4, flags(v)], [5, n]]))]));
    const vmas = maps.map(([s, n, status]) => message([[1, s], [2, s + BigInt(n * PAGE)], [3, 0], [4, 0], [5, 3], [6, 0x22], [7, status], [8, 1]]));
    writeFileSync(join(dir, `mm-${pid}.img`), imageFile(MM, [message([[1, 0x400000], ...vmas.map((v) => [14, v])])]));
    const memory = [];
    let p = 0;
    for (const [v, n] of runs) for (let j = 0; j < n; j++, p++) memory.push([v + BigInt(j * PAGE), buf.subarray(p * PAGE, (p + 1) * PAGE)]);
    sums[pid] = { sum: memorySum(memory), runs: runs.map(([v, n]) => [v.toString(), n]) };
  });
  writeFileSync(join(dir, 'fake-criu-pages.json'), JSON.stringify(sums));
} else if (mode === 'check' && existsSync(join(dir, 'fake-criu-pages.json'))) {
  // (An image real CRIU made, restored by the fake one in a GPU test, has no sums.)
  const sums = JSON.parse(readFileSync(join(dir, 'fake-criu-pages.json'), 'utf8'));
  const fail = (why) => {
    console.log(`(00.100000) Error (criu/pagemap.c:500): fake-criu: ${why}`);
    process.exit(1);
  };
  for (const [pid, want] of Object.entries(sums)) {
    const pagemap = join(dir, `pagemap-${pid}.img`);
    if (!existsSync(pagemap)) fail(`pagemap-${pid}.img is missing`);
    const [head, ...pes] = entries(pagemap);
    const pagesId = Number(new Map(fields(head)).get(1));
    const pagesFile = join(dir, `pages-${pagesId}.img`);
    if (!existsSync(pagesFile)) fail(`pages-${pagesId}.img is missing`);
    const pages = readFileSync(pagesFile);
    const present = new Map();
    let p = 0;
    for (const pe of pes) {
      const f = new Map(fields(pe));
      const v = f.get(1);
      const n = Number(f.get(5) ?? f.get(2));
      for (let j = 0; j < n; j++, p++) present.set(v + BigInt(j * PAGE), pages.subarray(p * PAGE, (p + 1) * PAGE));
    }
    if (p * PAGE !== pages.length) fail(`pages-${pagesId}.img holds ${pages.length} bytes, its pagemap ${p * PAGE}`);
    const anon = [];
    for (const [field, vma] of fields(entries(join(dir, `mm-${pid}.img`))[0]))
      if (field === 14) {
        const f = new Map(fields(vma));
        if (Number(f.get(7)) & 0x200) anon.push([f.get(1), f.get(2)]);
      }
    const zero = Buffer.alloc(PAGE);
    const memory = [];
    for (const [v0, n] of want.runs)
      for (let j = 0; j < n; j++) {
        const v = BigInt(v0) + BigInt(j * PAGE);
        const bytes = present.get(v) ?? (anon.some(([s, e]) => v >= s && v < e) ? zero : undefined);
        if (!bytes) fail(`page ${v.toString(16)} of process ${pid} is missing`);
        memory.push([v, bytes]);
      }
    if (memorySum(memory) !== want.sum) fail(`the memory of process ${pid} differs from what was dumped`);
  }
}
