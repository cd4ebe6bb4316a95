/**
 * Pre-copy for checkpoint --live. The pool is copied into staging while the
 * application runs. Then the blocks that changed meanwhile are copied again,
 * round after round, so that the pause only copies what changed since the
 * last round.
 *
 * What changed is found by digests, never assumed. The shim's kernel
 * digests each DIGEST_BLOCK of the pool, and the codec workers digest what
 * staging holds of it. A block whose two digests differ is copied again. A
 * copy made while the application writes may be torn: its digest then
 * differs from the pool's, and the block is copied again, in the pause at
 * the latest. Inside the pause the kernel's digests are taken with the
 * application held, so what the image stores is exactly the pool at that
 * moment (up to a 64-bit digest collision, the bound incremental images
 * already rely on).
 *
 * Each allocation has a fixed place in staging (its slot), so a block that
 * is copied again overwrites its older copy. An allocation that appears
 * during the pre-copy gets a slot from the headroom left for it.
 */
import { GpuckptError } from '../base/errors.js';
import type { CodecPool } from './codec-pool.js';
import { planBlocks, type ParentBlocks } from '../image/chain.js';
import type { AllocationRecord } from '../image/index.js';
import type { Progress } from '../base/progress.js';
import type { ShimSession, StagingMemory } from '../adapters/session.js';
import { alignUp, FRAME_BYTES, MAX_RANGES_PER_COPY, MIN_SKIPPED_ZERO_RUN, splitIntoPieces, stagingBytes, type Piece, type Placed } from './staging-plan.js';
import { formatBytes, round } from '../base/units.js';
import { digestAllocations } from './block-digests.js';

/** Rounds with the application running, at most. */
const MAX_ROUNDS = 8;
/** The pre-copy ends once a round finds no more than this changed: copying it is a small part of the pause (~1 ms at PCIe speed). */
const FINAL_BYTES = 64 * 1024 * 1024;
/** A round that still finds more than this share of the previous round's bytes changed is not converging: pause now. */
const CONVERGING = 0.8;
/**
 * One copy request moves at most this much. A device-wide synchronise in
 * the running application also waits for the shim's copy in flight, so this
 * bounds that wait (~5 ms).
 */
const REQUEST_BYTES = 256 * 1024 * 1024;
/** Room in staging for allocations made during the pre-copy. */
const HEADROOM_MIN = 256 * 1024 * 1024;

/** Even and not 0, so never a digest of the kernel (0, or odd): this block is not in staging. */
const NOT_COPIED = 2n;

interface Slot {
  alloc: AllocationRecord;
  offset: number;
  /** What staging holds of each block, by the kernel's function. */
  digests: BigUint64Array;
}

interface Run extends Placed {
  slot: Slot;
}

export interface LiveStats {
  /** Bytes copied and seconds taken in each round while the application ran. */
  rounds: { bytes: number; seconds: number }[];
  /** Seconds from opening the live window to closing it. */
  precopySeconds: number;
  /** Bytes copied inside the pause: what changed after the last round. */
  pauseBytes: number;
}

/** The pause's part: what to copy now, and where everything to store lies in staging. */
export interface LivePlan {
  /** Copy requests for the blocks that changed since their copy. */
  copies: Placed[][];
  /** Every live allocation in staging (one copy request each): what a suspend holds. */
  groups: Placed[][];
  /** The pieces to compress into frames, at their staging offsets. */
  frames: { piece: Piece; offset: number }[];
}

/** Staging for a live checkpoint: the whole pool, one slot per allocation, and headroom for allocations made during it. */
export function liveStagingBytes(status: { devices: { bytesInUse: bigint; allocations: number }[] }, limit: bigint | undefined, pid: number): number {
  const inUse = status.devices.reduce((s, d) => s + d.bytesInUse, 0n);
  const allocs = status.devices.reduce((s, d) => s + d.allocations, 0);
  const headroom = inUse / 8n > BigInt(HEADROOM_MIN) ? inUse / 8n : BigInt(HEADROOM_MIN);
  const least = inUse + BigInt(allocs) * 4096n;
  const bytes = stagingBytes(inUse + headroom, allocs, limit);
  if (bytes < least)
    throw new GpuckptError(
      'HOST_MEMORY',
      `checkpoint --live of process ${pid} needs host memory for its whole pool (${formatBytes(least)}) and only ${formatBytes(bytes)} may be used (--staging, or half of free memory); run it without --live`,
    );
  return bytes;
}

export class LiveCopy {
  private readonly slots = new Map<string, Slot>();
  private used = 0;
  readonly stats: LiveStats = { rounds: [], precopySeconds: 0, pauseBytes: 0 };

  constructor(
    private readonly session: ShimSession,
    readonly staging: StagingMemory,
    private readonly codecs: CodecPool,
    private readonly blockSize: number,
    private readonly progress: Progress,
  ) {}

  /** Copies the pool into staging, then what changed, round after round, with the application running. */
  async precopy(): Promise<void> {
    const t0 = performance.now();
    await this.session.liveWindow(true);
    try {
      // Round 1 copies everything: no block is in staging yet.
      let dirty = this.changedSince(await this.session.listAllocations());
      for (let round = 1; ; round++) {
        const r0 = performance.now();
        const bytes = await this.copy(dirty);
        this.stats.rounds.push({ bytes, seconds: roundS(r0) });
        this.progress.update(`checkpoint --live: round ${round} copied ${formatBytes(bytes)} with the application running`);
        if (round === MAX_ROUNDS) break;
        const allocations = await this.session.listAllocations();
        const digests = await digestAllocations(this.session, allocations, this.blockSize);
        if (!digests) throw new GpuckptError('NO_DIGEST_KERNEL', `process ${this.session.pid}: the driver would not run the digest kernel, which checkpoint --live needs`);
        dirty = this.changedSince(allocations, digests);
        const left = dirty.reduce((s, r) => s + r.length, 0);
        if (left <= FINAL_BYTES || left > CONVERGING * bytes) break;
      }
    } finally {
      this.stats.precopySeconds = roundS(t0);
      // The session may be gone already; its closing closes the window too.
      await this.session.liveWindow(false).catch(() => undefined);
    }
  }

  /**
   * Inside the pause, with the kernel's digests of every live allocation:
   * what to copy now (the blocks whose copy differs), and where each
   * piece to store lies: never an all-zero block (the image records those
   * by their digest), and with parent, only the blocks that differ from it.
   */
  finish(allocations: AllocationRecord[], digests: Buffer[], parent?: ParentBlocks): LivePlan {
    const runs = this.changedSince(allocations, digests, true);
    this.stats.pauseBytes = runs.reduce((s, r) => s + r.length, 0);
    const frames: LivePlan['frames'] = [];
    const whole: Placed[] = [];
    allocations.forEach((a, i) => {
      const slot = this.slotOf(a)!; // placed by changedSince, or it threw
      whole.push({ device: a.device, addr: a.addr, length: Number(a.size), stagingOffset: slot.offset });
      const { stored } = planBlocks([a], [digests[i]!], this.blockSize, parent, MIN_SKIPPED_ZERO_RUN);
      for (const piece of splitIntoPieces(stored)) frames.push({ piece, offset: slot.offset + Number(piece.addr - a.addr) });
    });
    return { copies: requests(runs.map(strip)), groups: requests(whole), frames };
  }

  /**
   * The runs of blocks of allocations whose copy in staging differs from
   * the kernel's digest (all of them without digests). An allocation that
   * staging has no room for is left out while running, and refused in the
   * pause (inPause), where nothing can be left out.
   */
  private changedSince(allocations: AllocationRecord[], digests?: Buffer[], inPause = false): Run[] {
    const runs: Run[] = [];
    const size = BigInt(this.blockSize);
    allocations.forEach((a, i) => {
      const slot = this.slotOf(a);
      if (!slot) {
        if (!inPause) return;
        throw new GpuckptError(
          'HOST_MEMORY',
          `process ${this.session.pid} allocated more during the live copy than staging has room for (${formatBytes(this.staging.size)}); no image written; try again, or without --live`,
        );
      }
      const gpu = digests?.[i];
      let run: Run | undefined;
      for (let b = 0; b < slot.digests.length; b++) {
        const same = gpu !== undefined && gpu.readBigUInt64LE(8 * b) === slot.digests[b];
        if (same) {
          run = undefined;
          continue;
        }
        const start = BigInt(b) * size;
        const length = Number((a.size - start < size ? a.size - start : size));
        if (run) run.length += length;
        else runs.push((run = { device: a.device, addr: a.addr + start, length, stagingOffset: slot.offset + Number(start), slot }));
      }
    });
    return runs;
  }

  /** The allocation's slot, placed now if it is new; undefined when staging has no room left. */
  private slotOf(a: AllocationRecord): Slot | undefined {
    const key = `${a.device}:${a.addr}:${a.size}`;
    let slot = this.slots.get(key);
    if (slot) return slot;
    const size = Number(a.size);
    if (this.used + size > this.staging.size) return undefined;
    const blocks = Math.ceil(size / this.blockSize);
    slot = { alloc: a, offset: this.used, digests: new BigUint64Array(blocks).fill(NOT_COPIED) };
    this.used = alignUp(this.used + size);
    this.slots.set(key, slot);
    return slot;
  }

  /**
   * Copies runs into their slots with the application running, and has the
   * workers digest each request's bytes as soon as it is in staging.
   * Returns the bytes copied, once every digest is in.
   */
  private async copy(runs: Run[]): Promise<number> {
    const digesting: Promise<void>[] = [];
    let bytes = 0;
    for (const request of requests(cut(runs, REQUEST_BYTES), REQUEST_BYTES)) {
      await this.session.copyOut(request.map(strip));
      for (const r of request) digesting.push(this.digestCopy(r));
      bytes += request.reduce((s, r) => s + r.length, 0);
    }
    await Promise.all(digesting);
    return bytes;
  }

  /** Records the digests of what staging now holds of run r, a frame at a time. */
  private async digestCopy(r: Run): Promise<void> {
    const first = Number(r.addr - r.slot.alloc.addr) / this.blockSize;
    const parts: Promise<void>[] = [];
    for (let off = 0; off < r.length; off += FRAME_BYTES) {
      const length = Math.min(FRAME_BYTES, r.length - off);
      parts.push(
        this.codecs.digest(r.stagingOffset + off, length, this.blockSize).then((d) => {
          const at = first + off / this.blockSize;
          for (let k = 0; k < d.length / 8; k++) r.slot.digests[at + k] = d.readBigUInt64LE(8 * k);
        }),
      );
    }
    await Promise.all(parts);
  }
}

/** Runs cut to at most max bytes each (on block boundaries: max is a multiple of the block). */
function cut(runs: Run[], max: number): Run[] {
  return runs.flatMap((r) => {
    const out: Run[] = [];
    for (let off = 0; off < r.length; off += max)
      out.push({ ...r, addr: r.addr + BigInt(off), stagingOffset: r.stagingOffset + off, length: Math.min(max, r.length - off) });
    return out;
  });
}

/** Ranges grouped into copy requests: at most MAX_RANGES_PER_COPY ranges and maxBytes bytes each. */
function requests<T extends Placed>(ranges: T[], maxBytes = Infinity): T[][] {
  const out: T[][] = [];
  let cur: T[] = [];
  let bytes = 0;
  for (const r of ranges) {
    if (cur.length === MAX_RANGES_PER_COPY || (cur.length > 0 && bytes + r.length > maxBytes)) {
      out.push(cur);
      cur = [];
      bytes = 0;
    }
    cur.push(r);
    bytes += r.length;
  }
  if (cur.length) out.push(cur);
  return out;
}

function strip(r: Placed): Placed {
  return { device: r.device, addr: r.addr, length: r.length, stagingOffset: r.stagingOffset };
}

function roundS(t0: number): number {
  return round((performance.now() - t0) / 1000, 4);
}

