/**
 * The limiter that bounds the frames in flight (controller/base/limiter.ts): at
 * most n at once, in order, and a limit changed while tasks run (an
 * incremental checkpoint compresses with fewer workers during its pause).
 */
import { describe, expect, it } from 'vitest';
import { Limiter } from '../controller/base/limiter.js';

/** A task that runs until its release() is called, recording the tasks running at once. */
function gatedTasks(limiter: Limiter, count: number) {
  let running = 0;
  let most = 0;
  const started: number[] = [];
  const gates: (() => void)[] = [];
  const done = Array.from({ length: count }, (_, i) =>
    limiter.run(async () => {
      running++;
      most = Math.max(most, running);
      started.push(i);
      await new Promise<void>((r) => (gates[i] = r));
      running--;
      return i;
    }),
  );
  return { done, started, release: (i: number) => gates[i]!(), most: () => most, running: () => running };
}

const settle = () => new Promise<void>((r) => setImmediate(r));

describe('Limiter', () => {
  it('runs at most n at once, in the order they came', async () => {
    const l = new Limiter(2);
    const t = gatedTasks(l, 5);
    await settle();
    expect(t.started).toEqual([0, 1]);
    t.release(1);
    await settle();
    expect(t.started).toEqual([0, 1, 2]);
    for (const i of [0, 2, 3, 4]) {
      t.release(i);
      await settle();
    }
    expect(await Promise.all(t.done)).toEqual([0, 1, 2, 3, 4]);
    expect(t.most()).toBe(2);
  });

  it('gives a finished task slot to the next waiting one, not to a task that comes later', async () => {
    const l = new Limiter(1);
    const t = gatedTasks(l, 2);
    await settle();
    t.release(0);
    // Arrives before the waiting task has resumed: it must wait its turn.
    let lateRan = false;
    const late = l.run(async () => (lateRan = true));
    await settle();
    expect(t.started).toEqual([0, 1]);
    expect(lateRan).toBe(false);
    t.release(1);
    await late;
    expect(lateRan).toBe(true);
  });

  it('lets waiting tasks start when the limit grows, and lets running ones finish when it shrinks', async () => {
    const l = new Limiter(1);
    const t = gatedTasks(l, 6);
    await settle();
    expect(t.started).toEqual([0]);
    l.setLimit(3);
    await settle();
    expect(t.started).toEqual([0, 1, 2]);
    l.setLimit(1);
    t.release(0);
    t.release(1);
    await settle();
    // Two finished, one still runs: already at the new limit, nothing starts.
    expect(t.started).toEqual([0, 1, 2]);
    t.release(2);
    await settle();
    expect(t.started).toEqual([0, 1, 2, 3]);
    expect(t.running()).toBe(1);
    l.setLimit(4);
    await settle();
    expect(t.started).toEqual([0, 1, 2, 3, 4, 5]);
    for (const i of [3, 4, 5]) t.release(i);
    expect(await Promise.all(t.done)).toEqual([0, 1, 2, 3, 4, 5]);
    expect(t.most()).toBe(3);
  });

  it('keeps running after a task fails', async () => {
    const l = new Limiter(1);
    await expect(l.run(async () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    expect(await l.run(async () => 7)).toBe(7);
  });
});
