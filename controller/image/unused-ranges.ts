/**
 * Ranges of a pool's allocations that the application's framework held
 * unused when the image was made (Manifest.unused): in no frame, and left
 * as they are by a restore. Address arithmetic on sorted, disjoint ranges.
 */
import type { AllocationRecord } from './manifest-types.js';

const byAddr = (x: { addr: bigint }, y: { addr: bigint }) => (x.addr < y.addr ? -1 : x.addr > y.addr ? 1 : 0);

/** The parts of free (any order, may overlap) that lie inside allocations, on their devices, sorted, merged within each allocation. */
export function unusedWithin(allocations: AllocationRecord[], free: { addr: bigint; size: bigint }[]): AllocationRecord[] {
  const allocs = [...allocations].sort(byAddr);
  const out: AllocationRecord[] = [];
  // The allocation the last range lies in: ranges merge within one only.
  let lastOwner = -1;
  let k = 0;
  for (const f of [...free].sort(byAddr)) {
    const end = f.addr + f.size;
    while (k < allocs.length && allocs[k]!.addr + allocs[k]!.size <= f.addr) k++;
    for (let j = k; j < allocs.length && allocs[j]!.addr < end; j++) {
      const a = allocs[j]!;
      const s = a.addr > f.addr ? a.addr : f.addr;
      const e = a.addr + a.size < end ? a.addr + a.size : end;
      if (e <= s) continue;
      const last = out[out.length - 1];
      if (last && lastOwner === j && last.addr + last.size >= s) {
        if (e > last.addr + last.size) last.size = e - last.addr;
      } else out.push({ device: a.device, addr: s, size: e - s });
      lastOwner = j;
    }
  }
  // Free ranges that overlap may reach an allocation again after a later one.
  return out.sort(byAddr);
}

/** ranges less the bytes of unused (sorted, disjoint), in ranges' order. */
export function withoutUnused(ranges: AllocationRecord[], unused: AllocationRecord[]): AllocationRecord[] {
  if (!unused.length) return ranges;
  const out: AllocationRecord[] = [];
  for (const r of ranges) {
    let at = r.addr;
    const end = r.addr + r.size;
    for (let i = firstEndingAfter(unused, at); i < unused.length && unused[i]!.addr < end; i++) {
      const u = unused[i]!;
      if (u.addr > at) out.push({ device: r.device, addr: at, size: u.addr - at });
      at = u.addr + u.size;
    }
    if (at < end) out.push({ device: r.device, addr: at, size: end - at });
  }
  return out;
}

/** Index of the first of sorted ranges ending after addr (bisection). */
export function firstEndingAfter(sorted: { addr: bigint; size: bigint }[], addr: bigint): number {
  return firstEndingAfterBy(sorted, addr, (r) => r.addr + r.size);
}

/** Index of the first of sorted (disjoint, by address) whose end, endOf, lies after addr. */
export function firstEndingAfterBy<T>(sorted: T[], addr: bigint, endOf: (x: T) => bigint): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (endOf(sorted[mid]!) <= addr) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
