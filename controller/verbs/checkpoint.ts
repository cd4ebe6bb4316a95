/**
 * checkpoint --gpu-only: a live image of the pool (engine/pool-image.ts);
 * the application runs on as soon as its pool is in host memory.
 */
import { writePoolImage, type CheckpointOptions, type CheckpointSummary } from '../engine/pool-image.js';
import { ShimSession } from '../adapters/session.js';

/** running: called once the application runs again (its pool copied), before the image is written. */
export async function checkpointGpuOnly(pid: number, out: string, opts: CheckpointOptions = {}, running?: () => void): Promise<CheckpointSummary> {
  const session = await ShimSession.open(pid);
  try {
    return await writePoolImage(session, out, opts, async () => {
      await session.resume();
      running?.();
    });
  } finally {
    session.close();
  }
}
