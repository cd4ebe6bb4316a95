/**
 * checkpoint --gpu-only: a live image of the pool (engine/pool-image.ts);
 * the application runs on as soon as its pool is in host memory.
 */
import { writePoolImage, type CheckpointOptions, type CheckpointSummary } from '../engine/pool-image.js';
import { ShimSession } from '../adapters/session.js';

export async function checkpointGpuOnly(pid: number, out: string, opts: CheckpointOptions = {}): Promise<CheckpointSummary> {
  const session = await ShimSession.open(pid);
  try {
    return await writePoolImage(session, out, opts, () => session.resume());
  } finally {
    session.close();
  }
}
