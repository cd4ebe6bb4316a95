#!/usr/bin/env node
// The layers of the code, checked (npm test runs this): every import of the
// TypeScript and every #include of the C points one way, down the layers
// below, and no file reaches itself through its imports (no cycle).
//
//   TypeScript: cli -> controller/verbs -> controller/engine ->
//               controller/image, controller/adapters -> controller/base,
//               native (the addon's typed face; protocol.gen.ts)
//   C:          shim/testing -> shim/control -> shim/collective ->
//               shim/interpose -> shim/pool,
//               protocol (the generated header, the digest function)
//
// Usage: node scripts/check-layers.mjs [--graph]
//   --graph  also print each file's imports, fan-in and fan-out.
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

/** Layer of a file: its folder, from the most to the least specific prefix; rank: what it may import (lower or equal). */
const LAYERS = [
  ['cli/', 'cli', 6],
  ['controller/verbs/', 'verbs', 5],
  ['controller/engine/', 'engine', 4],
  ['controller/image/', 'image', 3],
  ['controller/adapters/', 'adapters', 3],
  ['controller/base/', 'base', 1],
  ['native/', 'native', 2],
  ['shim/testing/', 'testing', 6],
  ['shim/control/', 'control', 5],
  ['shim/collective/', 'collective', 4],
  ['shim/interpose/', 'interpose', 3],
  ['shim/pool/', 'pool', 2],
  ['protocol/', 'protocol', 1],
];

function layerOf(file) {
  const l = LAYERS.find(([prefix]) => file.startsWith(prefix));
  return l ? { name: l[1], rank: l[2] } : undefined;
}

function walk(dir, exts) {
  const out = [];
  let names;
  try {
    names = readdirSync(join(root, dir));
  } catch {
    return out;
  }
  for (const n of names) {
    const rel = join(dir, n);
    if (statSync(join(root, rel)).isDirectory()) {
      if (n !== 'build' && n !== 'node_modules') out.push(...walk(rel, exts));
    } else if (exts.some((e) => n.endsWith(e))) out.push(rel);
  }
  return out;
}

/** file -> the files it imports (project files only). */
function graph() {
  const edges = new Map();
  for (const f of [...walk('cli', ['.ts']), ...walk('controller', ['.ts']), ...walk('native', ['.ts'])]) {
    const text = readFileSync(join(root, f), 'utf8');
    const deps = [...text.matchAll(/^\s*(?:import|export)\s[^'"]*?from\s+'(\.[^']+)'/gm)].map((m) => normalize(join(dirname(f), m[1].replace(/\.js$/, '.ts'))));
    edges.set(f, deps);
  }
  // In C a module is a .c with its .h: one node (shim/interpose/shim), so
  // that x.c -> y.h and y.c -> x.h is the cycle it is.
  const mod = (p) => p.replace(/\.[ch]$/, '');
  for (const f of [...walk('shim', ['.c', '.h']), ...walk('protocol', ['.h'])]) {
    const text = readFileSync(join(root, f), 'utf8');
    const deps = [...text.matchAll(/^#include "([^"]+)"/gm)].map((m) => {
      const local = normalize(join(dirname(f), m[1]));
      return mod(m[1].includes('/') || !['gpuckpt_protocol.h', 'block_digest_fn.h'].includes(m[1]) ? local : `protocol/${m[1]}`);
    });
    const node = mod(f);
    edges.set(node, [...new Set([...(edges.get(node) ?? []), ...deps.filter((d) => d !== node)])]);
  }
  return edges;
}

/** Strongly connected components of more than one file (or a file importing itself): the cycles. */
function cycles(edges) {
  let index = 0;
  const idx = new Map();
  const low = new Map();
  const stack = [];
  const on = new Set();
  const out = [];
  const visit = (v) => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const w of edges.get(v) ?? []) {
      if (!edges.has(w)) continue;
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
    }
    if (low.get(v) === idx.get(v)) {
      const scc = [];
      let w;
      do {
        w = stack.pop();
        on.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1 || (edges.get(v) ?? []).includes(v)) out.push(scc.sort());
    }
  };
  for (const v of edges.keys()) if (!idx.has(v)) visit(v);
  return out;
}

const edges = graph();
const problems = [];
for (const [f, deps] of edges) {
  const from = layerOf(f);
  for (const d of deps) {
    const to = layerOf(d);
    // Within a layer, or down to a lower rank: layers of one rank (image, adapters) stay apart.
    if (from && to && to.name !== from.name && to.rank >= from.rank)
      problems.push(`${f} (${from.name}) imports ${d} (${to.name}): imports point down the layers only`);
  }
}
const loops = cycles(edges);
for (const c of loops) problems.push(`import cycle: ${c.join(' -> ')}`);

const fanIn = new Map();
for (const deps of edges.values()) for (const d of deps) fanIn.set(d, (fanIn.get(d) ?? 0) + 1);
const top = (m) => [...m].sort((a, b) => b[1] - a[1])[0] ?? ['', 0];
const [inFile, inN] = top(fanIn);
const [outFile, outN] = top(new Map([...edges].map(([f, d]) => [f, d.length])));
if (process.argv.includes('--graph')) for (const [f, deps] of [...edges].sort()) console.log(`${f} (in ${fanIn.get(f) ?? 0}, out ${deps.length}): ${deps.map((d) => relative(dirname(f), d)).join(' ')}`);
if (problems.length) {
  for (const p of problems) console.error(`layers: ${p}`);
  process.exit(1);
}
console.log(`layers: ${edges.size} files, no cycle, every import points down; largest fan-in ${inN} (${inFile}), fan-out ${outN} (${outFile})`);
