/**
 * migrate: a suspend and a resume onto another GPU, the pool moved GPU to
 * GPU where the GPUs can copy to each other (engine/peer-hold.ts): the
 * remap then maps the moved memory and nothing is copied back in.
 */
import type { CheckpointOptions } from '../engine/pool-image.js';
import { resolveGpu, resumeProcess, suspendProcess, type ResumeSummary, type SuspendSummary } from '../engine/suspend.js';
import { readJob } from '../engine/job-plan.js';
import { GpuckptError } from '../base/errors.js';
import { round } from '../base/units.js';

export interface MigrateSummary {
  pid: number;
  device: string;
  /** How the pool went: GPU to GPU, or through host memory (and why). */
  route: 'gpu' | 'host';
  whyThroughHost?: string;
  rawBytes: number;
  /** The application's downtime: from its pause until it runs on the new GPU. */
  downtimeSeconds: number;
  /** The whole command, checks and preparations while the application ran included. */
  seconds: number;
  suspend: SuspendSummary;
  resume: ResumeSummary;
}

/** viaHost: through host memory even where the GPUs can copy to each other. */
export async function migrateProcess(pid: number, device: string, opts: CheckpointOptions & { viaHost?: boolean } = {}): Promise<MigrateSummary> {
  const target = resolveGpu(device); // refuse a bad target before the process is touched
  const instead = `a migrate moves one process alone; move its job instead: gpuckpt suspend JOB, then gpuckpt resume JOB --device ${device}`;
  const job = await readJob(pid, 'migrate', instead);
  if (job.comms.length) throw new GpuckptError('JOB_REFUSED', `process ${pid} runs NCCL (${job.comms.length} communicator(s)): ${instead}`);
  const t0 = performance.now();
  const suspend = await suspendProcess(pid, { ...opts, onto: target.uuid });
  const resume = await resumeProcess(pid, { ...opts, device });
  const seconds = (performance.now() - t0) / 1000;
  return {
    pid,
    device: resume.device!,
    route: suspend.heldIn === 'gpu' ? 'gpu' : 'host',
    whyThroughHost: suspend.heldIn === 'gpu' ? undefined : (suspend.whyNotOnGpu ?? (opts.viaHost ? 'asked to (--via-host)' : undefined)),
    rawBytes: suspend.rawBytes,
    downtimeSeconds: round(seconds - suspend.pauseStartSeconds),
    seconds: round(seconds),
    suspend,
    resume,
  };
}
