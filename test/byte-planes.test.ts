/**
 * Byte planes before zstd (controller/image/byte-planes.ts, format 3): the
 * native transform and its inverse, the per-frame choice (float data takes
 * planes, other data does not), and end to end with the fake driver: an
 * image whose every frame holds planes (GPUCKPT_SHUFFLE=4) restores bit
 * for bit; a bad setting is refused in one line.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { sameBuffers } from '../controller/adapters/app-driver.js';
import { choosePlanes, fromPlanes, PLANES_TUNING, toPlanes } from '../controller/image/byte-planes.js';
import { compressFrame, decompressFrame } from '../controller/image/frame-codec.js';
import { APPS, json, requireBuilt, Sandbox } from './helpers/e2e.js';

const box = new Sandbox();
beforeAll(requireBuilt);
afterAll(() => box.cleanup());

/** Floats as trained weights look: small, normally spread (Box-Muller), fp32 or bf16 (its upper half). */
function weights(n: number, bf16: boolean): Buffer {
  const f = new Float32Array(n);
  for (let i = 0; i < n; i++) f[i] = 0.02 * Math.sqrt(-2 * Math.log(1 - Math.random())) * Math.cos(2 * Math.PI * Math.random());
  if (!bf16) return Buffer.from(f.buffer);
  const u = new Uint32Array(f.buffer);
  const h = new Uint16Array(n);
  for (let i = 0; i < n; i++) h[i] = u[i]! >>> 16;
  return Buffer.from(h.buffer);
}

describe('byte planes', () => {
  it('are put back into elements exactly, whatever the length', () => {
    for (const size of [2, 4] as const)
      for (const n of [0, 1, 3, 4097, 1 << 20]) {
        const raw = randomBytes(n);
        const planes = toPlanes(raw, size, Buffer.alloc(n));
        if (n >= 8) expect(planes.equals(raw)).toBe(false);
        const back = Buffer.alloc(n);
        fromPlanes(planes, size, back);
        expect(back.equals(raw)).toBe(true);
      }
  });

  it('are chosen for float data only', () => {
    expect(choosePlanes(weights(1 << 20, false), 1)).toBe(4);
    expect(choosePlanes(weights(1 << 20, true), 1)).not.toBe(0);
    expect(choosePlanes(randomBytes(1 << 20), 1)).toBe(0);
    expect(choosePlanes(Buffer.alloc(1 << 20), 1)).toBe(0);
    expect(choosePlanes(weights(50_000, false), 1)).toBe(4); // smaller than the sample: the whole frame judged
    expect(choosePlanes(weights(1000, false), 1)).toBe(0); // too little for zstd to gain from planes
  });

  it('go into zstd with a small hash table: float planes come out smaller so, and whole', () => {
    for (const [raw, size] of [[weights(1 << 20, false), 4], [weights(1 << 20, true), 2]] as const) {
      const planes = toPlanes(raw, size, Buffer.alloc(raw.length));
      const tuned = compressFrame(planes, 1, PLANES_TUNING);
      expect(tuned.length).toBeLessThan(compressFrame(planes, 1).length);
      const back = Buffer.alloc(raw.length);
      fromPlanes(decompressFrame(tuned, raw.length, 'f'), size, back);
      expect(back.equals(raw)).toBe(true);
    }
  });

  it('round trip end to end: every frame as planes, restored bit for bit; a bad setting refused', async () => {
    const { app, ready } = await box.start(APPS.linked);
    const image = box.path('planes');
    const ck = box.cli(['checkpoint', String(app.pid), '--gpu-only', '-o', image], { GPUCKPT_SHUFFLE: '4' });
    expect(ck.stderr).toBe('');
    const frames = json<any>(box.cli(['inspect', image, '--json']).stdout).data.frames as { planes?: number }[];
    expect(frames.length).toBeGreaterThan(0);
    expect(frames.every((f) => f.planes === 4)).toBe(true);
    await app.command('mutate');
    expect(box.cli(['restore', image, '--into', String(app.pid)]).code).toBe(0);
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
    const bad = box.cli(['checkpoint', String(app.pid), '--gpu-only', '-o', box.path('x')], { GPUCKPT_SHUFFLE: 'yes' });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toBe('gpuckpt: GPUCKPT_SHUFFLE="yes" must be auto, off, 2 or 4 (byte planes of that element size in every frame)\n');
  });
});
