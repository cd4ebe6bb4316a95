/**
 * The CUDA processes of one job (members), moved together: suspended all
 * at once into their own pool images, and resumed all at once; a failure
 * of one leaves the others as they were.
 */
import { rmSync } from 'node:fs';
import { freemem } from 'node:os';
import { join } from 'node:path';
import { GpuckptError, isGpuckptError } from '../base/errors.js';
import { defaultWorkerCount } from './codec-pool.js';
import type { CheckpointOptions } from './pool-image.js';
import { resumeProcess, suspendProcess, type HandOff, type SuspendSummary } from './suspend.js';
import { ThawOrder } from './thaw-order.js';

/** Where a job's image keeps the pool images of its members after the first. */
export const MEMBERS_DIR = 'members';

/** The directory of member m's pool image within the job's image, for every member but the first (whose pool image is the image itself). */
export function memberImageDir(m: number): string {
  return join(MEMBERS_DIR, String(m));
}

/** opts for member m, its image's writer reported under the member's directory. */
export function memberOptions<T extends CheckpointOptions>(opts: T, m: number, first: boolean): T {
  const { onWriter } = opts;
  return onWriter ? { ...opts, onWriter: (w, dir) => onWriter(w, [first ? '' : memberImageDir(m), dir].filter(Boolean).join('/')) } : opts;
}

/** A pool this size or smaller weighs as much: an empty one (a launcher's) still gets a worker and staging for its bookkeeping. */
const LEAST_WEIGHT = 64 << 20;

/**
 * Each of the pools moved at once gets a part of the staging limit
 * (default: half of free host memory) and of the codec workers, in
 * proportion to its bytes (sizes; one per pool, all alike when unknown).
 * A 2-rank job's three pools had started 93 workers on 32 cores, in
 * 0.44-0.48 s against 0.12 s for one pool's 31, and each pause waits for
 * its pool's start; equal shares then gave the launcher's empty pool as
 * many workers as each rank's 4.8 GiB (docs/ARCHITECTURE.md, "Distributed
 * jobs").
 */
export function memberShares(opts: { stagingLimit?: bigint; workers?: number }, sizes: number[]): { stagingLimit?: bigint; workers?: number }[] {
  if (sizes.length <= 1) return sizes.map(() => ({}));
  const weights = sizes.map((s) => Math.max(s, LEAST_WEIGHT));
  const total = weights.reduce((a, b) => a + b, 0);
  const limit = Number(opts.stagingLimit ?? freemem() / 2);
  const workers = opts.workers ?? defaultWorkerCount();
  const counts = weights.map((w) => Math.max(1, Math.floor((workers * w) / total)));
  // No more than there are in all (the pools take them from those the command started): the ones raised to one come off the largest.
  for (let over = counts.reduce((a, b) => a + b, 0) - workers; over > 0; over--) {
    const largest = counts.indexOf(Math.max(...counts));
    if (counts[largest]! <= 1) break;
    counts[largest]!--;
  }
  return weights.map((w, i) => ({ stagingLimit: BigInt(Math.floor((limit * w) / total)), workers: counts[i] }));
}

/**
 * Suspends every member into its image (undefined: held in host memory),
 * all at once. If one fails, those that were suspended are resumed and the
 * first failure is thrown: the job runs on as it was.
 */
export async function suspendMembers(images: Map<number, string | undefined>, opts: CheckpointOptions & { keepDriver?: boolean; handOff?: HandOff; poolBytes?: Map<number, number> }): Promise<SuspendSummary[]> {
  const shares = memberShares(opts, [...images.keys()].map((m) => opts.poolBytes?.get(m) ?? 0));
  const results = await Promise.allSettled([...images].map(([m, to], i) => suspendProcess(m, { ...memberOptions(opts, m, i === 0), ...shares[i], to })));
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  const done = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  if (!failed) return done;
  const suspended = new Map([...images].filter((_, i) => results[i]!.status === 'fulfilled'));
  const stays = await resumeAfterFailure(await heldOrImages(done, suspended));
  for (const [m, image] of suspended) if (!stays.has(m) && image) rmSync(image, { recursive: true, force: true });
  const e = failed.reason as Error;
  throw new GpuckptError(isGpuckptError(e) ? e.code : 'INTERNAL', [e.message, ...stays.values()].join('; '));
}

/**
 * Where each member is resumed from after a failure: its image, or, for
 * one whose image was still being written (a suspend's handOff), where
 * its suspend held it (the snapshot holder's copy). Waits for those images
 * to end first: their writers must not outlive their directories.
 */
export async function heldOrImages(suspended: SuspendSummary[], images: Map<number, string | undefined>): Promise<Map<number, string | undefined>> {
  await Promise.allSettled(suspended.map((s) => s.pending));
  const handedOff = new Set(suspended.filter((s) => s.pending).map((s) => s.pid));
  return new Map([...images].map(([m, image]) => [m, handedOff.has(m) ? undefined : image]));
}

/**
 * Resumes every member from its image, all at once, after a failure: for
 * each that could not come back, a note of where its pool stays (its
 * image must then be kept).
 */
export async function resumeAfterFailure(images: Map<number, string | undefined>): Promise<Map<number, string>> {
  const failures = await resumeMembers(images);
  const stays = new Map<number, string>();
  [...images].forEach(([m, image], i) => {
    if (failures[i] !== undefined) stays.set(m, `process ${m} stays suspended with its pool ${image ? `at ${image}` : 'held'} (gpuckpt resume ${m})`);
  });
  return stays;
}

/** Resumes every member from its image (undefined: where its suspend held it), all at once: each one's failure, or undefined. */
export function resumeMembers(images: Map<number, string | undefined>): Promise<(unknown | undefined)[]> {
  const thawOrder = new ThawOrder(images.size);
  return Promise.all([...images].map(([m, image]) => resumeProcess(m, { keepImage: !!image, image, thawOrder }).then(() => undefined, (e: unknown) => e)));
}
