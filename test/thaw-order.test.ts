/**
 * Members resumed together thaw in the driver in an order
 * (controller/engine/thaw-order.ts): one without pool data waits until
 * every other member has thawed and pinned its staging, or failed.
 */
import { describe, expect, it } from 'vitest';

const { ThawOrder } = await import(new URL('../dist/controller/engine/thaw-order.js', import.meta.url).href);

const settled = (p: Promise<unknown>) => Promise.race([p.then(() => true), new Promise((r) => setTimeout(() => r(false), 20))]);

describe('ThawOrder', () => {
  it('members with data thaw at once; an empty one after all of them', async () => {
    const order = new ThawOrder(3);
    const [launcher, a, b] = [order.member(), order.member(), order.member()];
    const waited = launcher.wait(true);
    await a.wait(false);
    expect(await settled(waited)).toBe(false);
    a.done();
    await b.wait(false);
    expect(await settled(waited)).toBe(false);
    b.done();
    b.done(); // idempotent
    expect(await settled(waited)).toBe(true);
  });

  it('waits for a member that has not said yet, and is let go by its failure', async () => {
    const order = new ThawOrder(2);
    const [launcher, rank] = [order.member(), order.member()];
    const waited = launcher.wait(true);
    expect(await settled(waited)).toBe(false);
    rank.done(); // failed in its checks, before its turn
    expect(await settled(waited)).toBe(true);
  });

  it('members all empty thaw at once', async () => {
    const order = new ThawOrder(2);
    const turns = [order.member(), order.member()];
    expect(await settled(Promise.all(turns.map((t) => t.wait(true))))).toBe(true);
  });
});
