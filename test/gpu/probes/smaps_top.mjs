// Which mappings of a process hold its anonymous memory (what CRIU dumps of it),
// grouped by name, largest first, from /proc/PID/smaps. Run on a GPU host:
//   node test/gpu/probes/smaps_top.mjs PID [N]
import { readFileSync } from 'node:fs';

const [pid, n = '10'] = process.argv.slice(2);
const rows = [];
let cur;
for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
  const head = /^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$/.exec(line);
  if (head) {
    cur = { size: (parseInt(head[2], 16) - parseInt(head[1], 16)) / 1024, perms: head[3], name: head[4] || '[anon]', rss: 0, anon: 0, locked: 0 };
    rows.push(cur);
    continue;
  }
  const kv = /^(Rss|Anonymous|Locked):\s+(\d+) kB/.exec(line);
  if (kv && cur) cur[{ Rss: 'rss', Anonymous: 'anon', Locked: 'locked' }[kv[1]]] += Number(kv[2]);
}
const mb = (k) => (k / 1024).toFixed(1).padStart(8) + ' MiB';
const total = rows.reduce((s, r) => s + r.anon, 0);
console.log(`process ${pid}: ${rows.length} mappings, anonymous ${mb(total)}`);
// Grouped by name and permissions: many small anonymous mappings add up.
const groups = new Map();
for (const r of rows) {
  const k = `${r.perms} ${r.name}`;
  const g = groups.get(k) ?? { k, n: 0, size: 0, rss: 0, anon: 0, locked: 0 };
  g.n++;
  g.size += r.size;
  g.rss += r.rss;
  g.anon += r.anon;
  g.locked += r.locked;
  groups.set(k, g);
}
for (const g of [...groups.values()].sort((a, b) => b.anon - a.anon).slice(0, Number(n)))
  console.log(`${mb(g.anon)} anon ${mb(g.rss)} rss ${mb(g.size)} size ${mb(g.locked)} locked  x${g.n} ${g.k}`);
