// What CRIU's page images of a whole-process image hold: bytes, zero and
// repeated 4 KiB pages (within and across processes), and how they compress
// with zstd in 4 MiB frames on worker threads. Run on a GPU host against an
// image that `gpuckpt checkpoint` wrote:
//   node test/gpu/probes/criu_pages.mjs IMAGE [WORKERS]
import { createHash } from 'node:crypto';
import { openSync, readSync, readdirSync, statSync, closeSync } from 'node:fs';
import { join } from 'node:path';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { fileURLToPath } from 'node:url';

const FRAME = 4 << 20;
const PAGE = 4096;
const ZERO = Buffer.alloc(PAGE);

if (!isMainThread) {
  const { Compressor } = await import('zstd-napi');
  const c = new Compressor();
  c.setParameters({ compressionLevel: workerData.level });
  parentPort.on('message', ({ file, offset, length }) => {
    const fd = openSync(file, 'r');
    const buf = Buffer.allocUnsafe(length);
    readSync(fd, buf, 0, length, offset);
    closeSync(fd);
    parentPort.postMessage(c.compress(buf).length);
  });
} else {
  const [image, w = '16'] = process.argv.slice(2);
  const files = [];
  const walk = (d) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else files.push({ path: p, size: statSync(p).size, pages: /\/criu\/pages-\d+\.img$/.test(p) });
    }
  };
  walk(image);
  const pages = files.filter((f) => f.pages);
  const gb = (n) => (n / 1e9).toFixed(3) + ' GB';
  const sum = (l) => l.reduce((n, f) => n + f.size, 0);
  console.log(`image ${gb(sum(files))}: CRIU pages ${gb(sum(pages))} in ${pages.length} file(s), CRIU other ${gb(sum(files.filter((f) => !f.pages && f.path.includes('/criu/'))))}, pools ${gb(sum(files.filter((f) => !f.path.includes('/criu/'))))}`);
  for (const f of pages.sort((a, b) => b.size - a.size).slice(0, 8)) console.log(`  ${f.path.slice(image.length)} ${gb(f.size)}`);

  // Zero and repeated pages, across every pages file.
  const seen = new Map();
  let zero = 0, repeatSame = 0, repeatOther = 0, total = 0;
  const t0 = performance.now();
  for (const [i, f] of pages.entries()) {
    const fd = openSync(f.path, 'r');
    const buf = Buffer.allocUnsafe(FRAME);
    for (let off = 0; off < f.size; off += FRAME) {
      const n = readSync(fd, buf, 0, FRAME, off);
      for (let p = 0; p + PAGE <= n; p += PAGE) {
        total++;
        const page = buf.subarray(p, p + PAGE);
        if (page.equals(ZERO)) { zero++; continue; }
        const h = createHash('sha1').update(page).digest('base64');
        const first = seen.get(h);
        if (first === undefined) seen.set(h, i);
        else if (first === i) repeatSame++;
        else repeatOther++;
      }
    }
    closeSync(fd);
  }
  console.log(`4 KiB pages ${total}: zero ${zero} (${((100 * zero) / total).toFixed(1)} %), repeated in the same file ${repeatSame} (${((100 * repeatSame) / total).toFixed(1)} %), first seen in another process's file ${repeatOther} (${((100 * repeatOther) / total).toFixed(1)} %); unique ${gb((total - zero - repeatSame - repeatOther) * PAGE)} (${((performance.now() - t0) / 1000).toFixed(1)} s)`);

  // zstd in 4 MiB frames, on workers.
  const tasks = pages.flatMap((f) => Array.from({ length: Math.ceil(f.size / FRAME) }, (_, k) => ({ file: f.path, offset: k * FRAME, length: Math.min(FRAME, f.size - k * FRAME) })));
  for (const level of [1, 3]) {
    const workers = Array.from({ length: Number(w) }, () => new Worker(fileURLToPath(import.meta.url), { workerData: { level } }));
    const s0 = performance.now();
    let out = 0, next = 0;
    await Promise.all(workers.map((wk) => new Promise((res) => {
      const go = () => {
        if (next >= tasks.length) return res();
        wk.postMessage(tasks[next++]);
      };
      wk.on('message', (n) => { out += n; go(); });
      go();
    })));
    const s = (performance.now() - s0) / 1000;
    const raw = sum(pages);
    console.log(`zstd -${level} on ${w} workers: ${gb(raw)} -> ${gb(out)} (ratio ${(raw / out).toFixed(2)}) in ${s.toFixed(2)} s, ${(raw / 1e9 / s).toFixed(2)} GB/s raw`);
    await Promise.all(workers.map((wk) => wk.terminate()));
  }
}
