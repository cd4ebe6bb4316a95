/**
 * Verbs on a job of several CUDA processes (a launcher such as torchrun and
 * its ranks): suspend, resume and a --gpu-only checkpoint of all of them as
 * one. The ranks are first stopped at the same collective boundary (the
 * cut, collective-cut.ts); a suspend then tears their NCCL communicators
 * down so that no peer mapping reaches the driver's checkpoint, and the
 * resume makes them again behind the handles the application holds. A job
 * of one process with no communicator takes the single-process paths.
 */
import { mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { GpuckptError, isGpuckptError, valuesOrFirstFailure } from '../base/errors.js';
import { AllReady } from '../base/all-ready.js';
import { log } from '../base/log.js';
import { Latch } from '../base/latch.js';
import { round } from '../base/units.js';
import { ShimSession } from '../adapters/session.js';
import { JobCut } from '../engine/collective-cut.js';
import { readJob, type Job } from '../engine/job-plan.js';
import { MEMBERS_DIR, memberImageDir, memberOptions, memberShares, suspendMembers } from '../engine/members.js';
import type { CheckpointOptions, CheckpointSummary } from '../engine/pool-image.js';
import { resumeProcess, suspendProcess, type ResumeSummary, type SuspendSummary } from '../engine/suspend.js';
import { ThawOrder } from '../engine/thaw-order.js';
import { fsyncDir, publishImage, refuseTakenTarget } from '../image/durable.js';
import { removeStaleTempDirs } from '../image/index.js';
import { tempDirName } from '../image/temp-dirs.js';
import { checkpointGpuOnly } from './checkpoint.js';
import { CommFlag, NcclFlag, PoolState } from '../../native/index.js';

/** Beside a job image's own pool: what the job was. */
export const JOB_INFO = 'gpuckpt-job.json';

export interface JobSummary {
  pid: number;
  /** The processes that run CUDA, in the order of members. */
  members: number[];
  /** NCCL communicators carried across. */
  communicators: number;
  /** Until every rank stood at the same collective boundary. */
  cutSeconds: number;
  seconds: number;
}

export interface JobSuspendSummary extends JobSummary {
  suspended: SuspendSummary[];
  teardownSeconds: number;
  /** From the start until the last GPU of the job was free. */
  gpuFreeSeconds: number;
}

export interface JobResumeSummary extends Omit<JobSummary, 'cutSeconds'> {
  resumed: ResumeSummary[];
  rebuildSeconds: number;
}

export interface JobCheckpointSummary extends JobSummary {
  image: string;
  images: CheckpointSummary[];
  rawBytes: number;
  storedBytes: number;
  /** From holding the ranks until they ran again: the cut and the slowest pool's copy. */
  pauseSeconds: number;
}

const isSingle = (job: Job) => job.members.length === 1 && !job.comms.length && job.members[0] === job.pid;

/** Holds the job at its cut; the seconds it took. */
async function takeCut(job: Job): Promise<{ cut?: JobCut; seconds: number }> {
  const t0 = performance.now();
  const cut = await JobCut.take(job.members, job.comms);
  const seconds = round((performance.now() - t0) / 1000, 4);
  log('debug', 'job', `cut held in ${seconds.toFixed(4)} s`);
  return { cut, seconds };
}

/** After a failure that left the ranks held: made to run again, and the message said so. */
async function failedAt(cut: JobCut | undefined, e: unknown, rest: string): Promise<never> {
  const why = cut ? await cut.recover() : undefined;
  cut?.close();
  const msg = (e as Error).message;
  throw new GpuckptError(isGpuckptError(e) ? e.code : 'INTERNAL', why ? `${msg}; ${why}` : `${msg}; ${rest}`);
}

export async function suspendJob(pid: number, opts: { to?: string; force?: boolean; keepDriver?: boolean; progress?: boolean } = {}): Promise<SuspendSummary | JobSuspendSummary> {
  const t0 = performance.now();
  const job = await readJob(pid, 'suspend');
  if (isSingle(job)) return suspendProcess(pid, opts);
  if (opts.to) throw new GpuckptError('BAD_ARGUMENT', `the job of process ${pid} has ${job.members.length} CUDA processes (${job.members.join(', ')}): --to holds the pool of one; a job's are held in host memory (or use checkpoint)`);
  for (const m of job.members) await refuseSuspended(m, 'suspended already');
  const { cut, seconds: cutSeconds } = await takeCut(job);
  const d0 = performance.now();
  try {
    await cut?.teardown();
  } catch (e) {
    return failedAt(cut, e, 'the job runs on');
  }
  const teardownSeconds = round((performance.now() - d0) / 1000, 4);
  let suspended: SuspendSummary[];
  try {
    suspended = await suspendMembers(new Map(job.members.map((m) => [m, undefined])), { keepDriver: opts.keepDriver, progress: false, poolBytes: job.poolBytes });
  } catch (e) {
    return failedAt(cut, e, 'the job runs on');
  }
  cut?.close(); // the ranks stay held, their communicators down, until the resume
  const s0 = (d0 - t0) / 1000;
  return {
    pid,
    members: job.members,
    communicators: job.comms.length,
    cutSeconds,
    teardownSeconds,
    suspended,
    gpuFreeSeconds: round(s0 + teardownSeconds + Math.max(...suspended.map((s) => s.gpuFreeSeconds))),
    seconds: round((performance.now() - t0) / 1000),
  };
}

async function refuseSuspended(pid: number, what: string): Promise<void> {
  const s = await ShimSession.open(pid);
  try {
    if ((await s.status()).poolState === PoolState.SUSPENDED) throw new GpuckptError('ALREADY_SUSPENDED', `process ${pid} of the job is ${what}`);
  } finally {
    s.close();
  }
}

export async function resumeJob(pid: number, opts: { device?: string; progress?: boolean } = {}): Promise<ResumeSummary | JobResumeSummary> {
  const t0 = performance.now();
  // Every rank of every communicator must be here before anything moves.
  const job = await readJob(pid, 'resume');
  if (isSingle(job)) return resumeProcess(pid, opts);
  const { members, ranks } = job;
  const held = await Promise.all(
    members.map(async (m) => {
      const s = await ShimSession.open(m);
      try {
        return (await s.status()).poolState === PoolState.SUSPENDED;
      } finally {
        s.close();
      }
    }),
  );
  const toResume = members.filter((_, i) => held[i]);
  const down = ranks.some((r) => r.status.comms.some((c) => c.flags & CommFlag.DOWN));
  const waiting = ranks.some((r) => r.status.flags & NcclFlag.HELD);
  if (!toResume.length && !down && !waiting) throw new GpuckptError('NOT_SUSPENDED', `the job of process ${pid} is not suspended`);
  // A resume from an image lets go of its staging as its connection
  // closes: after the rebuild, as in a restore (process-restore.ts).
  const rebuilt = new Latch();
  const thawOrder = new ThawOrder(toResume.length);
  try {
    const resumed = valuesOrFirstFailure(
      await Promise.allSettled(toResume.map((m) => resumeProcess(m, { device: opts.device, progress: false, holdUntil: rebuilt.opened, thawOrder }))),
      (i, message) => `process ${toResume[i]} of the job: ${message}; its communicators stay down until every rank is resumed (gpuckpt resume ${pid})`,
    );
    const r0 = performance.now();
    const cut = await JobCut.attach(members);
    try {
      await cut?.rebuild();
      await cut?.release();
    } catch (e) {
      throw new GpuckptError(isGpuckptError(e) ? e.code : 'INTERNAL', `${(e as Error).message}; the ranks wait, their communicators down: gpuckpt resume ${pid} makes them again`);
    } finally {
      cut?.close();
    }
    return {
      pid,
      members,
      communicators: cut?.comms.length ?? 0,
      resumed,
      rebuildSeconds: round((performance.now() - r0) / 1000, 4),
      seconds: round((performance.now() - t0) / 1000),
    };
  } finally {
    rebuilt.open();
  }
}

/**
 * A consistent --gpu-only image of every rank's pool: the ranks held at
 * their cut, each pool written at once (the first into the image itself,
 * the others under members/PID), then let go.
 */
export async function checkpointJobGpuOnly(pid: number, out: string, opts: CheckpointOptions = {}): Promise<CheckpointSummary | JobCheckpointSummary> {
  const t0 = performance.now();
  const job = await readJob(pid, 'checkpoint');
  if (isSingle(job)) return checkpointGpuOnly(pid, out, opts);
  if (opts.parent || opts.live) throw new GpuckptError('BAD_ARGUMENT', `the job of process ${pid} has ${job.members.length} CUDA processes: --parent and --live are for a job of one`);
  const target = resolve(out);
  refuseTakenTarget(target, !!opts.force);
  await removeStaleTempDirs(dirname(target));
  const [primary] = job.members as [number, ...number[]];
  const work = join(dirname(target), tempDirName(basename(target)));
  const paths = new Map(job.members.map((m) => [m, m === primary ? work : join(dirname(target), tempDirName(`${basename(target)}-${m}`))]));
  // Each pool is set up while the job trains (its staging faulted in took
  // 2-8 s the first time on a host, 2x H200); the ranks are held at their
  // cut once every pool is, and each pause begins with it.
  let cut: JobCut | undefined;
  let cutSeconds = 0;
  let p0 = 0;
  let cutFailure: unknown;
  const cutting = new AllReady(job.members.length, async () => {
    p0 = performance.now();
    try {
      ({ cut, seconds: cutSeconds } = await takeCut(job));
    } catch (e) {
      throw (cutFailure = e); // says itself that the job runs on
    }
  });
  // The ranks go on once every pool is copied; the images are written after.
  let pauseSeconds = 0;
  let left = job.members.length;
  let released: Promise<void> | undefined;
  const running = () => {
    if (--left) return;
    pauseSeconds = round((performance.now() - p0) / 1000, 4);
    released = cut?.release();
    released?.catch(() => undefined);
  };
  let images: CheckpointSummary[];
  try {
    const shares = memberShares(opts, job.members.map((m) => job.poolBytes.get(m) ?? 0));
    const results = await Promise.allSettled(
      job.members.map((m, i) =>
        checkpointGpuOnly(m, paths.get(m)!, { ...memberOptions(opts, m, m === primary), force: false, progress: false, ...shares[i], beforePause: () => cutting.ready() }, running).catch((e: unknown) => {
          cutting.fail(e);
          throw e;
        }),
      ),
    );
    const bad = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (bad) throw bad.reason;
    images = results.map((r) => (r as PromiseFulfilledResult<CheckpointSummary>).value);
    await released;
  } catch (e) {
    for (const p of paths.values()) rmSync(p, { recursive: true, force: true });
    if (e === cutFailure) throw e;
    return failedAt(cut, e, 'the job runs on; no image written');
  }
  cut?.close();
  mkdirSync(join(work, MEMBERS_DIR), { mode: 0o700 });
  for (const m of job.members.slice(1)) renameSync(paths.get(m)!, join(work, memberImageDir(m)));
  writeFileSync(join(work, JOB_INFO), JSON.stringify({ pid, members: job.members, communicators: job.comms.map((c) => ({ key: c.key.toString(16), nranks: c.nranks, ranks: Object.fromEntries(c.pids) })) }, null, 1));
  await fsyncDir(join(work, MEMBERS_DIR));
  await fsyncDir(work);
  await publishImage(work, target, !!opts.force);
  return {
    image: target,
    pid,
    members: job.members,
    communicators: job.comms.length,
    cutSeconds,
    images: images.map((s, i) => ({ ...s, image: i === 0 ? target : join(target, memberImageDir(job.members[i]!)) })),
    rawBytes: images.reduce((n, s) => n + s.rawBytes, 0),
    storedBytes: images.reduce((n, s) => n + s.storedBytes, 0),
    pauseSeconds,
    seconds: round((performance.now() - t0) / 1000),
  };
}
