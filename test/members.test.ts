/**
 * A job's members moved at once share the host (controller/engine/members.ts):
 * each gets its part of the staging limit and of the codec workers.
 */
import { describe, expect, it } from 'vitest';

const { memberShare } = await import(new URL('../dist/controller/engine/members.js', import.meta.url).href);
const { defaultWorkerCount } = await import(new URL('../dist/controller/engine/codec-pool.js', import.meta.url).href);

describe('memberShare', () => {
  it('one member keeps the defaults', () => {
    expect(memberShare({}, 1)).toEqual({});
    expect(memberShare({ workers: 8, stagingLimit: 1n << 30n }, 1)).toEqual({});
  });

  it('n members get an nth of the staging limit and of the workers, at least one each', () => {
    expect(memberShare({ workers: 31, stagingLimit: 30n << 30n }, 3)).toEqual({ workers: 10, stagingLimit: 10n << 30n });
    expect(memberShare({ workers: 2, stagingLimit: 1n << 30n }, 3).workers).toBe(1);
    expect(memberShare({ stagingLimit: 1n << 30n }, 2).workers).toBe(Math.max(1, Math.floor(defaultWorkerCount() / 2)));
    expect(memberShare({}, 2).stagingLimit).toBeGreaterThan(0n);
  });
});
