/**
 * AllReady (controller/base/all-ready.ts): an action run once every party
 * is ready, its result handed to each; a party failing first fails the
 * others' waits.
 */
import { describe, expect, it } from 'vitest';

const { AllReady } = await import(new URL('../dist/controller/base/all-ready.js', import.meta.url).href);

const settled = (p: Promise<unknown>) => Promise.race([p.then(() => true, () => true), new Promise((r) => setTimeout(() => r(false), 20))]);

describe('AllReady', () => {
  it('runs the action once, when the last party is ready, and gives each its result', async () => {
    let runs = 0;
    const all = new AllReady(3, async () => ++runs);
    const first = all.ready();
    const second = all.ready();
    expect(await settled(first)).toBe(false);
    expect(runs).toBe(0);
    const third = all.ready();
    expect(await Promise.all([first, second, third])).toEqual([1, 1, 1]);
    expect(runs).toBe(1);
  });

  it('fails the waiting parties with the error of one that failed before it was ready', async () => {
    let runs = 0;
    const all = new AllReady(3, async () => ++runs);
    const waiting = all.ready();
    all.fail(new Error('set-up failed'));
    await expect(waiting).rejects.toThrow('set-up failed');
    await expect(all.ready()).rejects.toThrow('set-up failed');
    expect(runs).toBe(0);
  });

  it('a failure after the action leaves its result alone', async () => {
    const all = new AllReady(1, async () => 'held');
    expect(await all.ready()).toBe('held');
    all.fail(new Error('a pause failed'));
    expect(await all.ready()).toBe('held');
  });

  it('an action that fails fails every party', async () => {
    const all = new AllReady(2, async () => {
      throw new Error('cut not reached');
    });
    const a = all.ready();
    const b = all.ready();
    await expect(a).rejects.toThrow('cut not reached');
    await expect(b).rejects.toThrow('cut not reached');
  });
});
