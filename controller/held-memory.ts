/**
 * The pool's data held in host memory while a process is suspended. The
 * staging memory the DMA filled stays with the shim (unpinned and unmapped,
 * only its memfd), and a small layout file in the hold directory says where
 * each piece of the pool lies in it. Suspend releases the GPU as soon as the
 * DMA ends, and resume is DMA only: nothing is compressed on the way out or
 * decompressed on the way back.
 */
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DEFAULT_LEASE_MS } from './checkpoint.js';
import { GpuckptError } from './errors.js';
import type { ShimSession, StagingMemory } from './session.js';
import { alignUp, MAX_RANGES_PER_COPY, splitIntoPieces, stagingBytes, type Piece } from './staging-plan.js';
import { native } from '../native/index.js';

const LAYOUT_FILE = 'held-layout.json';

export interface Placed {
  device: number;
  addr: bigint;
  length: number;
  stagingOffset: number;
}

export interface HeldLayout {
  rawBytes: number;
  /** The GPUs of the process's ordinals when it was suspended. */
  devices: string[];
  /** One copy request each. */
  groups: Placed[][];
}

export interface StagedPool {
  staging: StagingMemory;
  layout: HeldLayout;
  pauseStart: number;
  copySeconds: number;
}

/** Pieces packed one after the other, in groups of one copy request. */
export function packPieces(pieces: Piece[]): { groups: Placed[][]; bytes: number } {
  const groups: Placed[][] = [];
  let offset = 0;
  for (let i = 0; i < pieces.length; i += MAX_RANGES_PER_COPY) {
    groups.push(
      pieces.slice(i, i + MAX_RANGES_PER_COPY).map((p) => {
        const placed = { device: p.device, addr: p.addr, length: p.length, stagingOffset: offset };
        offset = alignUp(offset + p.length);
        return placed;
      }),
    );
  }
  return { groups, bytes: offset };
}

/**
 * Pauses the process and copies its whole pool into one staging memory,
 * or returns undefined (process running again) when the host cannot give
 * that much: the caller then goes through a compressed image instead.
 * On success the process stays paused.
 */
export async function stagePool(session: ShimSession, opts: { stagingLimit?: bigint; leaseMs?: number }): Promise<StagedPool | undefined> {
  const status = await session.status();
  const inUse = status.devices.reduce((s, d) => s + d.bytesInUse, 0n);
  const allocs = status.devices.reduce((s, d) => s + d.allocations, 0);
  const want = stagingBytes(inUse, Number(inUse >> 24n) + allocs, opts.stagingLimit);
  if (BigInt(want) < inUse) return undefined;
  const devices = (await session.devices()).map((d) => d.uuid);
  const staging = await session.mapStaging(want, 'private');
  const pauseStart = performance.now();
  let paused = false;
  try {
    await session.quiesce(opts.leaseMs ?? DEFAULT_LEASE_MS);
    paused = true;
    const pieces = splitIntoPieces(await session.listAllocations());
    const { groups, bytes } = packPieces(pieces);
    if (bytes > staging.size) {
      // The application allocated more since the status: take the slow path.
      await session.resume();
      paused = false;
      await session.unmapStaging();
      return undefined;
    }
    const c0 = performance.now();
    for (const g of groups) await session.copyOut(g);
    const copySeconds = (performance.now() - c0) / 1000;
    return { staging, layout: { rawBytes: pieces.reduce((s, p) => s + p.length, 0), devices, groups }, pauseStart, copySeconds };
  } catch (e) {
    if (paused) await session.resume().catch(() => undefined);
    throw e; // the shim drops the staging as the session closes
  }
}

/** DMA of the held data back into the (remapped) pool; the caller holds the process. */
export async function copyHeldIn(session: ShimSession, layout: HeldLayout): Promise<{ copySeconds: number; registerSeconds: number }> {
  const staging = await session.mapStaging(0, 'held');
  try {
    const c0 = performance.now();
    for (const g of layout.groups) await session.copyIn(g);
    return { copySeconds: (performance.now() - c0) / 1000, registerSeconds: staging.registerNs / 1e9 };
  } finally {
    if (staging.fd >= 0) native().closeFd(staging.fd);
  }
}

export function writeHeldLayout(dir: string, layout: HeldLayout): void {
  const groups = layout.groups.map((g) => g.map((p) => ({ ...p, addr: p.addr.toString(16) })));
  writeFileSync(join(dir, LAYOUT_FILE), JSON.stringify({ ...layout, groups }), { mode: 0o600 });
}

/** The layout when dir describes data held in memory; undefined for an image. */
export function readHeldLayout(dir: string): HeldLayout | undefined {
  let text: string;
  try {
    text = readFileSync(join(dir, LAYOUT_FILE), 'utf8');
  } catch {
    return undefined;
  }
  try {
    const raw = JSON.parse(text) as { rawBytes: number; devices: string[]; groups: (Omit<Placed, 'addr'> & { addr: string })[][] };
    return { rawBytes: raw.rawBytes, devices: raw.devices, groups: raw.groups.map((g) => g.map((p) => ({ ...p, addr: BigInt(`0x${p.addr}`) }))) };
  } catch (e) {
    throw new GpuckptError('INTERNAL', `the held data's layout at ${join(dir, LAYOUT_FILE)} is unreadable: ${(e as Error).message}`);
  }
}

export function removeHeldLayout(dir: string): void {
  rmSync(join(dir, LAYOUT_FILE), { force: true });
}
