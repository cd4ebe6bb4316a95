// zstd on trained float state with and without a byte-plane shuffle (byte k
// of every element together, then byte k+1...), in 4 MiB frames as pool
// images store them: ratio and single-thread speed at levels 1 and 3, and
// shuffled at level 1 with each of zstd's parameter sets in SHUFFLE_ZSTD
// (a JSON list, e.g. '[{"hashLog":12},{"minMatch":7}]').
//   node test/gpu/probes/shuffle.mjs DIR   (files from shuffle_states.py)
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { Compressor } from 'zstd-napi';

const FRAME = 4 << 20;
const dir = process.argv[2];

function shuffle(src, size) {
  const n = Math.floor(src.length / size);
  const out = Buffer.allocUnsafe(src.length);
  for (let b = 0; b < size; b++) for (let i = 0; i < n; i++) out[b * n + i] = src[i * size + b];
  src.copy(out, n * size, n * size);
  return out;
}

for (const f of readdirSync(dir).filter((n) => n.endsWith('.bin')).sort()) {
  const data = readFileSync(join(dir, f));
  const size = f.includes('bf16') ? 2 : 4;
  const line = [`${f}: ${(data.length / 1e6).toFixed(1)} MB`];
  for (const level of [1, 3]) {
    const c = new Compressor();
    c.setParameters({ compressionLevel: level });
    for (const shuffled of [false, true]) {
      let out = 0, ms = 0, shuffleMs = 0;
      for (let at = 0; at < data.length; at += FRAME) {
        let frame = data.subarray(at, at + FRAME);
        const s0 = performance.now();
        if (shuffled) frame = shuffle(frame, size);
        const t0 = performance.now();
        out += c.compress(frame).length;
        ms += performance.now() - t0;
        shuffleMs += t0 - s0;
      }
      line.push(`-${level}${shuffled ? ' shuffled' : ''} ratio ${(data.length / out).toFixed(3)} at ${(data.length / 1e3 / ms).toFixed(0)} MB/s${shuffled ? ` (+ shuffle in JS ${(data.length / 1e3 / shuffleMs).toFixed(0)} MB/s)` : ''}`);
    }
  }
  for (const params of JSON.parse(process.env.SHUFFLE_ZSTD ?? '[]')) {
    const c = new Compressor();
    c.setParameters({ compressionLevel: 1, ...params });
    let out = 0, ms = 0;
    for (let at = 0; at < data.length; at += FRAME) {
      const frame = shuffle(data.subarray(at, at + FRAME), size);
      const t0 = performance.now();
      out += c.compress(frame).length;
      ms += performance.now() - t0;
    }
    line.push(`-1 shuffled ${JSON.stringify(params)} ratio ${(data.length / out).toFixed(3)} at ${(data.length / 1e3 / ms).toFixed(0)} MB/s`);
  }
  console.log(line.join('; '));
}
