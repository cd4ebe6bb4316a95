/**
 * The CUDA processes of one job (members), moved together: suspended all
 * at once into their own pool images, and resumed all at once; a failure
 * of one leaves the others as they were.
 */
import { rmSync } from 'node:fs';
import { freemem } from 'node:os';
import { GpuckptError, isGpuckptError } from '../base/errors.js';
import type { CheckpointOptions } from './pool-image.js';
import { resumeProcess, suspendProcess, type SuspendSummary } from './suspend.js';

/** Each of n pools moved at once gets an nth of the staging limit (default: half of free host memory). */
export function stagingShare(limit: bigint | undefined, n: number): { stagingLimit?: bigint } {
  return n > 1 ? { stagingLimit: (limit ?? BigInt(Math.floor(freemem() / 2))) / BigInt(n) } : {};
}

/**
 * Suspends every member into its image, all at once. If one fails, those
 * that were suspended are resumed and the first failure is thrown: the
 * job runs on as it was.
 */
export async function suspendMembers(images: Map<number, string>, opts: CheckpointOptions): Promise<SuspendSummary[]> {
  const results = await Promise.allSettled([...images].map(([m, to]) => suspendProcess(m, { ...opts, ...stagingShare(opts.stagingLimit, images.size), to })));
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (!failed) return results.map((r) => (r as PromiseFulfilledResult<SuspendSummary>).value);
  const back = await Promise.all(
    [...images].map(([m, image], i) =>
      results[i]!.status === 'fulfilled'
        ? resumeProcess(m, { keepImage: true, image }).then(
            () => (rmSync(image, { recursive: true, force: true }), ''),
            () => `; process ${m} stays suspended with its pool at ${image} (gpuckpt resume ${m})`,
          )
        : '',
    ),
  );
  const e = failed.reason as Error;
  throw new GpuckptError(isGpuckptError(e) ? e.code : 'INTERNAL', `${e.message}${back.join('')}`);
}

/** Resumes every member from its image, all at once: each one's failure, or undefined. */
export function resumeMembers(images: Map<number, string>): Promise<(unknown | undefined)[]> {
  return Promise.all([...images].map(([m, image]) => resumeProcess(m, { keepImage: true, image }).then(() => undefined, (e: unknown) => e)));
}
