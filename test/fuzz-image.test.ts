/**
 * The image reader under fuzzing (test/fuzz/image-fuzz.ts). CI runs a
 * bounded, seeded batch; `npm run fuzz:image` runs 100k inputs (or
 * FUZZ_COUNT) with a seed from FUZZ_SEED.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fuzzImages } from './fuzz/image-fuzz.js';

const count = Number(process.env.FUZZ_COUNT ?? 400);
const seed = Number(process.env.FUZZ_SEED ?? 20261122);
const dir = mkdtempSync(join(tmpdir(), 'gpuckpt-fuzz-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('image reader fuzzing', () => {
  it(
    `refuses or fully verifies every one of ${count} damaged images (seed ${seed})`,
    async () => {
      const r = await fuzzImages({ seed, count, dir });
      console.log(`fuzz: ${r.inputs} inputs, ${r.accepted} accepted, refused ${JSON.stringify(r.refused)}`);
      expect(r.inputs).toBe(count);
      // The mutations must really reach the validator and the frame checks.
      expect(r.refused.IMAGE_CORRUPT ?? 0).toBeGreaterThan(0);
      expect(r.refused.IMAGE_DATA_CORRUPT ?? 0).toBeGreaterThan(0);
    },
    Math.max(60_000, count * 50),
  );
});
