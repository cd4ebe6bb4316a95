/**
 * Inside a pause, what the application's framework holds but no tensor
 * uses (its in-process hook, through the shim: shim/python/), as ranges of
 * the pool's allocations an image leaves out. Never fails a checkpoint: a
 * hook that cannot answer means the whole pool, and says why.
 */
import { FrameworkState } from '../../native/index.js';
import type { ShimSession } from '../adapters/session.js';
import type { AllocationRecord } from '../image/index.js';
import { bytesOf } from '../image/chain.js';
import { unusedWithin } from '../image/unused-ranges.js';
import { formatBytes, round } from '../base/units.js';

/** How long the hook may take, by default (GPUCKPT_FRAMEWORK_WAIT, seconds). */
const DEFAULT_WAIT_MS = 500;
/** At most: the shim answers nothing else meanwhile, and the pause's lease must not run out. */
const MOST_WAIT_MS = 10_000;

export interface FrameworkUse {
  /** The framework that answered ('PyTorch'). */
  name: string;
  /** Left out of the image (empty when the whole pool was taken). */
  unused: AllocationRecord[];
  unusedBytes: number;
  /** Why the whole pool was taken although a framework was there. */
  wholePoolBecause?: string;
  seconds: number;
}

/** Undefined when the process has no hook, or no framework on the GPU: nothing to leave out, nothing to say. */
export async function askFramework(session: ShimSession, allocations: AllocationRecord[]): Promise<FrameworkUse | undefined> {
  const t0 = performance.now();
  const waitMs = Math.min(MOST_WAIT_MS, process.env.GPUCKPT_FRAMEWORK_WAIT ? Math.round(Number(process.env.GPUCKPT_FRAMEWORK_WAIT) * 1000) : DEFAULT_WAIT_MS);
  const seconds = () => round((performance.now() - t0) / 1000, 4);
  let rep;
  try {
    rep = await session.frameworkFree(waitMs);
  } catch (e) {
    return { name: 'framework', unused: [], unusedBytes: 0, wholePoolBecause: `asking its hook failed: ${(e as Error).message}`, seconds: seconds() };
  }
  if (rep.state === FrameworkState.NO_HOOK || rep.state === FrameworkState.IDLE) return undefined;
  const name = rep.framework || 'framework';
  if (rep.state !== FrameworkState.RANGES) return { name, unused: [], unusedBytes: 0, wholePoolBecause: rep.why || 'its hook could not read it', seconds: seconds() };
  const unused = unusedWithin(allocations, rep.ranges);
  return { name, unused, unusedBytes: bytesOf(unused), seconds: seconds() };
}

/** One line for a summary: what the framework's answer did to the image. */
export function describeFrameworkUse(f: FrameworkUse): string {
  return f.wholePoolBecause
    ? `${f.name}: the whole pool was taken: ${f.wholePoolBecause}`
    : `${f.name}: ${formatBytes(f.unusedBytes)} its allocator holds unused left out (${f.unused.length} range(s), read in ${f.seconds} s)`;
}
