/**
 * What a verb given a PID acts on: that process and its descendants (the
 * job, when PID is a launcher such as torchrun), the ones among them that
 * run CUDA under gpuckpt (members), and their NCCL communicators, which
 * must lie wholly inside (collective-cut.ts refuses a part of a job).
 */
import { GpuckptError } from '../base/errors.js';
import { isCudaMember, jobOf } from '../adapters/jobs.js';
import { readTree, type TreeProcess } from '../adapters/process-tree.js';
import { hasShimLoaded } from '../adapters/processes.js';
import { ShimSession } from '../adapters/session.js';
import { checkJobComms, type JobComm, type RankComms } from './collective-cut.js';

export interface Job {
  pid: number;
  tree: TreeProcess[];
  members: number[];
  comms: JobComm[];
  /** Each member's NCCL status, as read for the checks. */
  ranks: RankComms[];
  /** Each member's pool (bytes mapped), as read for the checks: its share of staging and workers when moved with the others. */
  poolBytes: Map<number, number>;
}

/**
 * The job under pid, checked for verb ('suspend', 'checkpoint', ...):
 * refused, untouched, when it is part of a larger one; instead: what the
 * refusal tells the user to do (default: verb the whole job).
 */
export async function readJob(pid: number, verb: string, instead = wholeJob(pid, verb)): Promise<Job> {
  const tree = readTree(pid);
  if (!hasShimLoaded(pid)) throw new GpuckptError('NOT_UNDER_GPUCKPT', `process ${pid} is not running under gpuckpt (start it with gpuckpt run -- PROGRAM)`);
  const members = tree.filter((p) => isCudaMember(p.pid)).map((p) => p.pid);
  if (!members.length)
    throw new GpuckptError('NOT_UNDER_GPUCKPT', `process ${pid} and its children have not started CUDA yet, so there is nothing on a GPU to ${verb}: try once they have`);
  const read = await Promise.all(members.map(readMember));
  const ranks = read.map(({ pid, status }) => ({ pid, status }));
  const comms = checkJobComms(ranks, members.length > 1 ? `the job of process ${pid}` : `process ${pid}`, instead);
  return { pid, tree, members, comms, ranks, poolBytes: new Map(read.map((r) => [r.pid, r.poolBytes])) };
}

/** A member's communicators (none: an empty list) and pool size, through one session. */
async function readMember(pid: number): Promise<RankComms & { poolBytes: number }> {
  const s = await ShimSession.open(pid);
  try {
    const [status, st] = await Promise.all([s.ncclStatus(), s.status()]);
    return { pid, status, poolBytes: st.devices.reduce((n, d) => n + Number(d.bytesMapped), 0) };
  } finally {
    s.close();
  }
}

/** What to run instead of a verb on part of a job. */
function wholeJob(pid: number, verb: string): string {
  const launcher = jobOf(pid)?.launcher;
  return launcher && launcher !== pid ? `${verb} the whole job instead: gpuckpt ${verb} ${launcher}` : `${verb} a process whose descendants hold every rank (the job's launcher)`;
}
