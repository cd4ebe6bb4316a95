/**
 * Byte planes before zstd (controller/image/byte-planes.ts, formats 3 and
 * 5): the native transform and its inverse, the per-frame choice (float
 * data takes planes, other data does not; planes that do not compress are
 * stored), a zstd frame per plane, and end to end with the fake driver: an
 * image whose every frame holds planes (GPUCKPT_SHUFFLE=4) restores bit
 * for bit; a bad setting is refused in one line.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { sameBuffers } from '../controller/adapters/app-driver.js';
import { isGpuckptError } from '../controller/base/errors.js';
import { chooseLayout, fromPlanes, PLANES_TUNING, toPlanes } from '../controller/image/byte-planes.js';
import { compressFrame, compressPlanes, decompressFrame } from '../controller/image/frame-codec.js';
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
    const planes = (raw: Uint8Array) => chooseLayout(raw, 1).planes;
    expect(planes(weights(1 << 20, false))).toBe(4);
    expect(planes(weights(1 << 20, true))).not.toBe(0);
    expect(planes(randomBytes(1 << 20))).toBe(0);
    expect(planes(Buffer.alloc(1 << 20))).toBe(0);
    expect(planes(weights(50_000, false))).toBe(4); // smaller than the sample: the whole frame judged
    expect(planes(weights(16, false))).toBe(0); // too little: four frames' headers cost more than planes gain
  });

  it('that do not compress are stored: low mantissa bytes, never the exponent', () => {
    const fp32 = chooseLayout(weights(1 << 20, false), 1);
    expect(fp32.stored & 0b0011).toBe(0b0011);
    expect(fp32.stored & 0b1000).toBe(0);
    expect(chooseLayout(weights(1 << 20, true), 1, 2)).toEqual({ planes: 2, stored: 0b01 });
    // A forced size is kept whatever the data; only what to store is judged.
    expect(chooseLayout(Buffer.alloc(1 << 20), 1, 4)).toEqual({ planes: 4, stored: 0 });
    expect(chooseLayout(randomBytes(1 << 20), 1, 4)).toEqual({ planes: 4, stored: 0b1111 });
  });

  it('go into zstd a frame each, stored or compressed, and come back whole', () => {
    for (const [raw, size] of [[weights((1 << 18) + 3, false), 4], [weights((1 << 18) + 1, true), 2], [randomBytes(4097), 4], [Buffer.alloc(0), 4], [randomBytes(3), 4]] as const)
      for (let stored = 0; stored < 1 << size; stored += size === 4 ? 5 : 1) {
        const planes = toPlanes(raw, size, Buffer.alloc(raw.length));
        const data = compressPlanes(planes, size, stored, 1, PLANES_TUNING);
        const back = Buffer.alloc(raw.length);
        fromPlanes(decompressFrame(data, raw.length, 'f'), size, back);
        expect(back.equals(raw)).toBe(true);
      }
  });

  it('stored or not, take no more room than one frame of them, and a damaged stored plane is found', () => {
    const raw = weights(1 << 20, false);
    const planes = toPlanes(raw, 4, Buffer.alloc(raw.length));
    const { stored } = chooseLayout(raw, 1);
    const split = compressPlanes(planes, 4, stored, 1, PLANES_TUNING);
    expect(split.length).toBeLessThan(compressFrame(planes, 1, PLANES_TUNING).length * 1.005);
    const damaged = Buffer.from(split);
    damaged[100] ^= 1; // inside plane 0, stored
    let code: string | undefined;
    try {
      decompressFrame(damaged, raw.length, 'f');
    } catch (e) {
      code = isGpuckptError(e) ? e.code : 'other';
    }
    expect(code).toBe('IMAGE_DATA_CORRUPT');
    expect(() => decompressFrame(split, raw.length - 1, 'f')).toThrow(/expected/);
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
