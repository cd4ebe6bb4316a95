// What private anonymous memory a process gained between two moments (for
// example the driver's checkpoint of its device state), and how much of it
// is zero pages: the bytes CRIU would dump for nothing. Run on a GPU host:
//   node test/gpu/probes/new_anon.mjs snap PID FILE   (before)
//   node test/gpu/probes/new_anon.mjs diff PID FILE   (after)
import { closeSync, openSync, readFileSync, readSync, writeFileSync } from 'node:fs';

const [mode, pid, file] = process.argv.slice(2);
const PAGE = 4096;

/** private anonymous mappings (no file, or [heap]) as [lo, hi) with their name. */
function privateAnon() {
  const out = [];
  for (const line of readFileSync(`/proc/${pid}/maps`, 'utf8').split('\n')) {
    const m = /^([0-9a-f]+)-([0-9a-f]+) (\S+) (\S+) (\S+) (\d+)\s*(.*)$/.exec(line);
    if (!m || m[3][3] !== 'p' || m[6] !== '0' || !m[3].startsWith('rw')) continue;
    if (m[7] && m[7] !== '[heap]') continue;
    out.push({ lo: parseInt(m[1], 16), hi: parseInt(m[2], 16), name: m[7] || '[anon]' });
  }
  return out;
}

/** the parts of now's ranges that no range of before covers. */
function gained(before, now) {
  const out = [];
  for (const r of now) {
    let pieces = [{ lo: r.lo, hi: r.hi }];
    for (const b of before) {
      pieces = pieces.flatMap((p) => {
        if (b.hi <= p.lo || b.lo >= p.hi) return [p];
        const rest = [];
        if (p.lo < b.lo) rest.push({ lo: p.lo, hi: b.lo });
        if (b.hi < p.hi) rest.push({ lo: b.hi, hi: p.hi });
        return rest;
      });
    }
    for (const p of pieces) out.push({ ...p, name: r.name, whole: r.hi - r.lo });
  }
  return out;
}

/** present and zero pages of [lo, hi), read through pagemap and mem. */
function census(lo, hi, pagemap, mem) {
  const pages = (hi - lo) / PAGE;
  const pm = Buffer.alloc(pages * 8);
  readSync(pagemap, pm, 0, pm.length, (lo / PAGE) * 8);
  const buf = Buffer.alloc(PAGE);
  let present = 0;
  let zero = 0;
  for (let i = 0; i < pages; i++) {
    if (!(pm.readBigUInt64LE(i * 8) & (1n << 63n))) continue;
    present++;
    readSync(mem, buf, 0, PAGE, lo + i * PAGE);
    let z = true;
    for (let j = 0; j < PAGE; j += 8) if (buf.readBigUInt64LE(j) !== 0n) { z = false; break; }
    if (z) zero++;
  }
  return { present, zero };
}

if (mode === 'snap') {
  writeFileSync(file, JSON.stringify(privateAnon()));
} else {
  const before = JSON.parse(readFileSync(file, 'utf8'));
  const now = privateAnon();
  const pagemap = openSync(`/proc/${pid}/pagemap`, 'r');
  const mem = openSync(`/proc/${pid}/mem`, 'r');
  const mib = (pages) => ((pages * PAGE) / 2 ** 20).toFixed(1);
  let tp = 0;
  let tz = 0;
  const rows = [];
  for (const g of gained(before, now)) {
    const c = census(g.lo, g.hi, pagemap, mem);
    tp += c.present;
    tz += c.zero;
    if (c.present * PAGE >= 2 ** 20) rows.push({ ...g, ...c });
  }
  // All private anonymous memory too: what CRIU dumps of it, and its zeros.
  let ap = 0;
  let az = 0;
  for (const r of now) {
    const c = census(r.lo, r.hi, pagemap, mem);
    ap += c.present;
    az += c.zero;
  }
  closeSync(pagemap);
  closeSync(mem);
  console.log(`process ${pid}: gained ${mib(tp)} MiB present, ${mib(tz)} MiB of it zero; all private anon ${mib(ap)} MiB present, ${mib(az)} MiB zero`);
  for (const r of rows.sort((a, b) => b.present - a.present).slice(0, 12))
    console.log(`  ${r.lo.toString(16)}-${r.hi.toString(16)} ${r.name} (mapping ${mib(r.whole / PAGE)} MiB): ${mib(r.present)} MiB present, ${mib(r.zero)} MiB zero`);
}
