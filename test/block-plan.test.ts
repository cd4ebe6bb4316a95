/**
 * What a copy moves, from the block digests: the ranges to copy, the zero
 * runs left on the GPU and the one zero fill per allocation that stands
 * for them, against a parent the blocks that changed; and how a held copy
 * lays those ranges out in host memory, a copy request's worth at a time.
 */
import { describe, expect, it } from 'vitest';
import { ParentBlocks, planBlocks, zeroRanges } from '../controller/image/chain.js';
import { unusedWithin, withoutUnused } from '../controller/image/unused-ranges.js';
import { placeHeld } from '../controller/engine/held-memory.js';
import { MAX_RANGES_PER_COPY, packAll } from '../controller/engine/staging-plan.js';

const KIB = 1024;
const BLOCK = 256 * KIB;
const BASE = 0x600000000000n;

/** Digests of an allocation's blocks: 0 where zero(k), else a nonzero value of k. */
function digests(blocks: number, zero: (k: number) => boolean): Buffer {
  const d = Buffer.alloc(8 * blocks);
  for (let k = 0; k < blocks; k++) if (!zero(k)) d.writeBigUInt64LE(BigInt.asUintN(64, (BigInt(k) + 1n) * 0x9e3779b97f4a7c15n) || 1n, 8 * k);
  return d;
}

const range = (block: number, blocks: number, device = 0, base = BASE) => ({ device, addr: base + BigInt(block * BLOCK), size: BigInt(blocks * BLOCK) });

describe('unused ranges', () => {
  const a = { device: 0, addr: BASE, size: BigInt(8 * BLOCK) };
  const b = { device: 1, addr: BASE + (1n << 40n), size: BigInt(2 * BLOCK) };

  it('keeps the parts of free ranges inside allocations, on their devices, merged', () => {
    const free = [
      { addr: BASE + BigInt(7 * BLOCK), size: BigInt(4 * BLOCK) }, // runs past a's end
      { addr: BASE - 4096n, size: BigInt(BLOCK) + 4096n }, // starts before a
      { addr: BASE + BigInt(BLOCK), size: BigInt(BLOCK) }, // touches the one before: merged
      { addr: b.addr + 4096n, size: 4096n },
      { addr: BASE + BigInt(100 * BLOCK), size: 4096n }, // in no allocation
    ];
    expect(unusedWithin([b, a], free)).toEqual([range(0, 2), range(7, 1), { device: 1, addr: b.addr + 4096n, size: 4096n }]);
    // Two allocations end to end, one free range over both: one range in each.
    const next = { device: 0, addr: a.addr + a.size, size: BigInt(BLOCK) };
    expect(unusedWithin([a, next], [{ addr: BASE + BigInt(7 * BLOCK), size: BigInt(2 * BLOCK) }])).toEqual([range(7, 1), range(8, 1)]);
  });

  it('takes them out of the ranges to copy, and lets a child store what a parent left out', () => {
    expect(withoutUnused([a], [range(1, 2), range(5, 1)])).toEqual([range(0, 1), range(3, 2), range(6, 2)]);
    expect(withoutUnused([range(2, 1)], [range(1, 4)])).toEqual([]);
    // The parent has the same digests, but left blocks 2-3 out: the child stores them.
    const d = digests(8, () => false);
    const parent = new ParentBlocks([a], [d], BLOCK, [{ device: 0, addr: BASE + BigInt(2 * BLOCK) + 4096n, size: BigInt(BLOCK) }]);
    expect(planBlocks([a], [d], BLOCK, parent).stored).toEqual([range(2, 2)]);
  });
});

describe('planBlocks', () => {
  // 10 blocks, the last one 100 KiB: zeros at 1, 3-5 and 9.
  const alloc = { device: 0, addr: BASE, size: BigInt(9 * BLOCK + 100 * KIB) };
  const d = digests(10, (k) => k === 1 || (k >= 3 && k <= 5) || k === 9);

  it('leaves out every zero run when no run is too short, the last (short) block included', () => {
    const plan = planBlocks([alloc], [d], BLOCK);
    expect(plan.stored).toEqual([range(0, 1), range(2, 1), range(6, 3)]);
    expect(plan.zeros.bytes).toBe(4 * BLOCK + 100 * KIB);
    // One fill: from the first zero block to the end of the allocation.
    expect(plan.zeros.fills).toEqual([{ device: 0, addr: BASE + BigInt(BLOCK), size: BigInt(8 * BLOCK + 100 * KIB) }]);
  });

  it('stores zero runs shorter than the minimum with the data around them', () => {
    const plan = planBlocks([alloc], [d], BLOCK, undefined, 3 * BLOCK);
    expect(plan.stored).toEqual([range(0, 3), { device: 0, addr: BASE + BigInt(6 * BLOCK), size: BigInt(3 * BLOCK + 100 * KIB) }]);
    expect(plan.zeros.bytes).toBe(3 * BLOCK);
    expect(plan.zeros.fills).toEqual([range(3, 3)]);
  });

  it('without zeros stores everything and fills nothing', () => {
    const plan = planBlocks([alloc], [digests(10, () => false)], BLOCK);
    expect(plan.stored).toEqual([{ device: 0, addr: BASE, size: alloc.size }]);
    expect(plan.zeros).toEqual({ bytes: 0, fills: [] });
  });

  it('against a parent, stores only blocks whose digest or length differ', () => {
    // The parent's own allocation, block 0's and block 7's digests since changed.
    const had = new Uint8Array(d);
    had[0] ^= 1;
    had[8 * 7] ^= 1;
    const plan = planBlocks([alloc], [d], BLOCK, new ParentBlocks([alloc], [had], BLOCK));
    expect(plan.stored).toEqual([range(0, 1), range(7, 1)]);
    expect(plan.zeros.bytes).toBe(4 * BLOCK + 100 * KIB);
    // Against the same digests of an allocation 4 KiB shorter, only the last block's length differs.
    const data = digests(10, () => false);
    const shorter = { ...alloc, size: alloc.size - 4096n };
    expect(planBlocks([alloc], [data], BLOCK, new ParentBlocks([shorter], [data], BLOCK)).stored).toEqual([{ device: 0, addr: BASE + BigInt(9 * BLOCK), size: BigInt(100 * KIB) }]);
  });

  it('against a parent whose allocations lie elsewhere, compares block by address', () => {
    // The parent's allocation starts a block later (block 0 is not in it), on the same block grid;
    // another one on device 1 at the same addresses does not count.
    const later = { device: 0, addr: BASE + BigInt(BLOCK), size: alloc.size - BigInt(BLOCK) };
    const had = new Uint8Array(d.subarray(8));
    had[8 * 6] ^= 1; // block 7 of the child
    const parent = new ParentBlocks([later, { ...alloc, device: 1 }], [had, d], BLOCK);
    expect(planBlocks([alloc], [d], BLOCK, parent).stored).toEqual([range(0, 1), range(7, 1)]);
    // Off the grid by 4 KiB, no block of the parent matches one of the child.
    const off = new ParentBlocks([{ ...alloc, addr: BASE - 4096n, size: alloc.size + 4096n }], [d], BLOCK);
    expect(planBlocks([alloc], [d], BLOCK, off).stored).toEqual(planBlocks([alloc], [d], BLOCK).stored);
  });

  it('plans each allocation apart, on its own device', () => {
    const other = { device: 1, addr: BASE + (1n << 30n), size: BigInt(4 * BLOCK) };
    const plan = planBlocks([alloc, other], [d, digests(4, (k) => k === 0)], BLOCK);
    expect(plan.stored.slice(3)).toEqual([range(1, 3, 1, other.addr)]);
    expect(plan.zeros.fills[1]).toEqual(range(0, 1, 1, other.addr));
  });

  it('agrees with zeroRanges on where the zeros are', () => {
    expect(zeroRanges([alloc], [d], BLOCK)).toEqual([range(1, 1), range(3, 3), { device: 0, addr: BASE + BigInt(9 * BLOCK), size: BigInt(100 * KIB) }]);
  });
});

describe('placeHeld', () => {
  it('lays ranges end to end, 4 KiB aligned, a copy request of ranges per group', () => {
    const n = MAX_RANGES_PER_COPY + 5;
    const ranges = Array.from({ length: n }, (_, i) => ({ device: i % 2, addr: BASE + BigInt(i) * 1_000_000n, size: BigInt(5000 + i) }));
    const { groups, end, bytes } = placeHeld(ranges);
    expect(groups.map((g) => g.length)).toEqual([MAX_RANGES_PER_COPY, 5]);
    const placed = groups.flat();
    expect(placed.map((p) => p.addr)).toEqual(ranges.map((r) => r.addr));
    expect(placed.map((p) => p.device)).toEqual(ranges.map((r) => r.device));
    for (let i = 1; i < n; i++) expect(placed[i]!.stagingOffset).toBe(Math.ceil((placed[i - 1]!.stagingOffset + placed[i - 1]!.length) / 4096) * 4096);
    expect(bytes).toBe(ranges.reduce((s, r) => s + Number(r.size), 0));
    const last = placed[n - 1]!;
    expect(end).toBe(Math.ceil((last.stagingOffset + last.length) / 4096) * 4096);
    // The same offsets as packAll's for the same lengths.
    expect(packAll(placed.map((p) => ({ length: p.length }))).flat().map((x) => x.offset)).toEqual(placed.map((p) => p.stagingOffset));
  });

  it('places nothing for nothing', () => {
    expect(placeHeld([])).toEqual({ groups: [], end: 0, bytes: 0 });
  });
});
