/**
 * A job's members moved at once share the host (controller/engine/members.ts):
 * each gets its part of the staging limit and of the codec workers, by the
 * size of its pool.
 */
import { describe, expect, it } from 'vitest';

const { memberShares } = await import(new URL('../dist/controller/engine/members.js', import.meta.url).href);
const { defaultWorkerCount } = await import(new URL('../dist/controller/engine/codec-pool.js', import.meta.url).href);

const GiB = 2 ** 30;

describe('memberShares', () => {
  it('one member keeps the defaults', () => {
    expect(memberShares({}, [5 * GiB])).toEqual([{}]);
    expect(memberShares({ workers: 8, stagingLimit: 1n << 30n }, [0])).toEqual([{}]);
  });

  it('members of unknown or equal size get an nth of the staging limit and of the workers, at least one each', () => {
    expect(memberShares({ workers: 31, stagingLimit: 30n << 30n }, [0, 0, 0])).toEqual(Array(3).fill({ workers: 10, stagingLimit: 10n << 30n }));
    expect(memberShares({ workers: 2, stagingLimit: 1n << 30n }, [GiB, GiB, GiB]).map((s: { workers: number }) => s.workers)).toEqual([1, 1, 1]);
    expect(memberShares({ stagingLimit: 1n << 30n }, [0, 0])[0].workers).toBe(Math.max(1, Math.floor(defaultWorkerCount() / 2)));
    expect(memberShares({}, [0, 0])[1].stagingLimit).toBeGreaterThan(0n);
  });

  it("a launcher's empty pool gets one worker and little staging; the ranks share the rest by size", () => {
    const [launcher, a, b] = memberShares({ workers: 31, stagingLimit: 40n << 30n }, [0, 4 * GiB, 4 * GiB]);
    expect(launcher.workers).toBe(1);
    expect(a.workers).toBe(15);
    expect(b.workers).toBe(15);
    expect(launcher.stagingLimit).toBeLessThan(1n << 30n);
    expect(a.stagingLimit).toBeGreaterThan(19n << 30n);
    const [small, big] = memberShares({ workers: 30, stagingLimit: 30n << 30n }, [2 * GiB, 8 * GiB]);
    expect([small.workers, big.workers]).toEqual([6, 24]);
    // Raised to one each, the small ones come off the largest: no more than the workers the command started.
    const many = memberShares({ workers: 8 }, [0, 0, 0, 64 * GiB]).map((m: { workers: number }) => m.workers);
    expect(many).toEqual([1, 1, 1, 5]);
    expect(small.stagingLimit + big.stagingLimit).toBeLessThanOrEqual(30n << 30n);
  });
});
