/**
 * Reading an image's or a pause's block digests (the shim's digest
 * kernel: one 8-byte digest per block, 0 for a block of zeros).
 */
import type { AllocationRecord } from './manifest-types.js';

/**
 * An allocation's digests (8 bytes per block of size bytes from its start,
 * the last block shorter), read by block index with plain numbers: the
 * pause plans 65536 blocks of a 16 GiB pool, which a BigInt per block
 * made a 50 ms walk.
 */
export class AllocationBlocks {
  readonly count: number;
  private readonly view: DataView;
  private readonly total: number;

  constructor(
    private readonly a: AllocationRecord,
    private readonly size: number,
    d: Uint8Array,
    /** 1 for a block whose bytes an image does not hold (a parent's unused ranges). */
    private readonly absentMask?: Uint8Array,
  ) {
    this.view = new DataView(d.buffer, d.byteOffset, d.byteLength);
    this.count = d.byteLength >>> 3;
    this.total = Number(a.size);
  }

  absent(k: number): boolean {
    return this.absentMask?.[k] === 1;
  }

  isZero(k: number): boolean {
    return this.view.getUint32(k * 8, true) === 0 && this.view.getUint32(k * 8 + 4, true) === 0;
  }

  /** Whether block k's digest equals block j's of other. */
  sameDigest(k: number, other: AllocationBlocks, j: number): boolean {
    return this.view.getUint32(k * 8, true) === other.view.getUint32(j * 8, true) && this.view.getUint32(k * 8 + 4, true) === other.view.getUint32(j * 8 + 4, true);
  }

  /** Bytes of blocks [from, to). */
  bytes(from: number, to: number): number {
    return Math.min(to * this.size, this.total) - from * this.size;
  }

  addr(k: number): bigint {
    return this.a.addr + BigInt(k * this.size);
  }

  /** Blocks [from, to) as one range. */
  range(from: number, to: number): AllocationRecord {
    return { device: this.a.device, addr: this.addr(from), size: BigInt(this.bytes(from, to)) };
  }

  /** Each run of consecutive blocks for which wanted holds, as one range. */
  runs(wanted: (k: number) => boolean): AllocationRecord[] {
    const out: AllocationRecord[] = [];
    let start = -1;
    for (let k = 0; k <= this.count; k++) {
      const w = k < this.count && wanted(k);
      if (w && start < 0) start = k;
      else if (!w && start >= 0) {
        out.push(this.range(start, k));
        start = -1;
      }
    }
    return out;
  }
}
