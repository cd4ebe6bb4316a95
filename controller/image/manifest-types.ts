/** What an image's manifest holds (manifest.ts encodes and decodes it, manifest-check.ts checks it). */
import type { DATA_FILE } from './format.js';

export interface ImageSource {
  pid: number;
  command: string[];
  host: string;
  uid: number;
}

/** The fixed-address pool: device d owns [base + d*sliceSize, base + (d+1)*sliceSize). */
export interface PoolLayout {
  base: bigint;
  sliceSize: bigint;
  deviceCount: number;
  quantum: bigint;
}

export interface DeviceRecord {
  ordinal: number;
  name: string;
  uuid: string;
  totalMemory: bigint;
}

export interface AllocationRecord {
  device: number;
  addr: bigint;
  size: bigint;
}

/** Bytes the process held outside the pool, which a gpu-only image does not contain. */
export interface OutsidePoolBytes {
  managed: bigint;
  streamOrdered: bigint;
  host: bigint;
  unrouted: bigint;
}

/** One zstd frame in pool.zst: `length` raw bytes of device memory at `addr`. */
export interface FrameRecord {
  device: number;
  addr: bigint;
  length: number;
  offset: bigint;
  compressedLength: number;
  /** The frame holds the raw bytes as byte planes of elements of this size (byte 0 of every element, then byte 1, ...): float data compresses better so. */
  planes?: 2 | 4;
}

export interface DataSection {
  file: typeof DATA_FILE;
  frames: FrameRecord[];
  rawBytes: bigint;
  storedBytes: bigint;
}

/**
 * Digests of every block of every allocation (the shim's GPU kernel):
 * digests[i] holds 8 bytes (u64 LE) per block of allocations[i], blocks of
 * `size` bytes from the allocation's start (the last one shorter); 0 means
 * all zeros. What a child image compares against to store only changes.
 */
export interface BlockDigests {
  size: number;
  digests: Uint8Array[];
}

/**
 * The image an incremental image was made against: its frames hold only
 * the blocks that differ from it, and every other byte comes from the
 * parent (and its own parents). manifestSha256 is the SHA-256 of the
 * parent's manifest payload, so a parent replaced since is refused.
 */
export interface ParentRecord {
  path: string;
  manifestSha256: Uint8Array;
}

export interface Manifest {
  format: 'gpuckpt-image';
  /** OLDEST_FORMAT_VERSION..FORMAT_VERSION; written as FORMAT_VERSION. */
  version: number;
  protocolVersion: number;
  /** gpu-only: the pool alone; process: the pool plus a CRIU image in criu/. */
  kind: 'gpu-only' | 'process';
  createdAt: string;
  source: ImageSource;
  pool: PoolLayout;
  devices: DeviceRecord[];
  allocations: AllocationRecord[];
  outsidePool: OutsidePoolBytes;
  data: DataSection;
  blocks?: BlockDigests;
  /**
   * Ranges of the allocations the application's framework held but no
   * tensor used (sorted, disjoint): in no frame, and a restore leaves them
   * as they are. From format version 4.
   */
  unused?: AllocationRecord[];
  parent?: ParentRecord;
  /** Informational only (timings, counters); never affects restore. */
  stats?: Record<string, number>;
}
