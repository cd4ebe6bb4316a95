/**
 * Block digests of a process's allocations, from the shim's GPU kernel:
 * what an image records so that a later checkpoint --parent can store only
 * the blocks that changed. Requests are batched (many allocations, one
 * round trip) because they run inside the application's pause.
 */
import { MAX_DIGEST_RANGES, MAX_DIGESTS, type StatusReply } from '../../native/index.js';
import type { AllocationRecord } from '../image/index.js';
import type { ShimSession } from '../adapters/session.js';

/** Loads the kernel on every device that has allocations (per status), before the pause (the driver's first compile is not free). */
export async function loadDigestKernels(session: ShimSession, status: StatusReply): Promise<boolean> {
  for (const [device, d] of status.devices.entries()) if (d.allocations > 0 && !(await session.loadDigestKernel(device))) return false;
  return true;
}

/** Every allocation's digests (8 bytes per block of blockSize), or undefined where the driver will not run the kernel. */
export async function digestAllocations(session: ShimSession, allocations: AllocationRecord[], blockSize: number): Promise<Buffer[] | undefined> {
  const size = BigInt(blockSize);
  const blocks = (length: bigint) => Number((length + size - 1n) / size);
  // Segments of at most MAX_DIGESTS blocks, cut on block boundaries.
  const segments = allocations.flatMap((a, index) => {
    const out: { index: number; device: number; addr: bigint; length: bigint }[] = [];
    const span = size * BigInt(MAX_DIGESTS);
    for (let off = 0n; off < a.size; off += span) out.push({ index, device: a.device, addr: a.addr + off, length: a.size - off < span ? a.size - off : span });
    return out;
  });
  const parts: Buffer[][] = allocations.map(() => []);
  for (const device of new Set(segments.map((s) => s.device))) {
    const mine = segments.filter((s) => s.device === device);
    for (let i = 0; i < mine.length; ) {
      const batch: typeof mine = [];
      let n = 0;
      while (i < mine.length && batch.length < MAX_DIGEST_RANGES && n + blocks(mine[i]!.length) <= MAX_DIGESTS) {
        n += blocks(mine[i]!.length);
        batch.push(mine[i++]!);
      }
      const reply = await session.blockDigests(device, batch.map((s) => ({ addr: s.addr, length: s.length })), blockSize);
      if (!reply) return undefined;
      let at = 0;
      for (const s of batch) {
        const bytes = 8 * blocks(s.length);
        parts[s.index]!.push(reply.subarray(at, at + bytes));
        at += bytes;
      }
    }
  }
  return parts.map((p) => Buffer.concat(p));
}
