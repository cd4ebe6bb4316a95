/**
 * The NCCL side of a distributed job (shim/collective/): the communicators
 * of every rank, the shapes a checkpoint cannot carry (refused before
 * anything is touched), the cut that stops every rank at the same
 * collective boundary, and the teardown and rebuild of the communicators
 * around a checkpoint. docs/ARCHITECTURE.md ("Distributed jobs") says why.
 */
import { GpuckptError, isGpuckptError } from '../base/errors.js';
import { faultPoint } from '../base/faults.js';
import { ShimSession } from '../adapters/session.js';
import { CommFlag, NcclFlag, type NcclComm, type NcclReply } from '../../native/index.js';

export interface RankComms {
  pid: number;
  status: NcclReply;
}

/** One communicator of the job: its ranks' processes, by rank. */
export interface JobComm {
  key: bigint;
  nranks: number;
  pids: Map<number, number>;
}

const DEFAULT_CUT_TIMEOUT_MS = 10_000;
const POLL_MS = 2;

function keyName(key: bigint): string {
  return key.toString(16).padStart(16, '0');
}

function describeComm(c: NcclComm): string {
  return `communicator ${keyName(c.key)} (rank ${c.rank} of ${c.nranks})`;
}

/**
 * The job's communicators, grouped across its processes; a GpuckptError
 * (JOB_REFUSED) naming the first one gpuckpt cannot carry across a
 * checkpoint, or whose ranks are not all in the job. job: how to name the
 * job to the user ("the job of process 4242"); whole: what to run instead.
 */
export function checkJobComms(ranks: RankComms[], job: string, whole: string): JobComm[] {
  const byKey = new Map<bigint, JobComm>();
  for (const { pid, status } of ranks) {
    if (status.memAllocations)
      throw new GpuckptError('JOB_REFUSED', `process ${pid} holds ${status.memAllocations} blocks from ncclMemAlloc, which NCCL maps into its peers and gpuckpt cannot carry across a checkpoint; free them first (PyTorch: do not use NCCL's memory pool)`);
    for (const c of status.comms) {
      const name = `process ${pid} ${describeComm(c)}`;
      if (c.flags & CommFlag.MULTI_DEVICE) throw new GpuckptError('JOB_REFUSED', `${name} is one of several ranks in one process (ncclCommInitAll): gpuckpt carries one rank per process`);
      if (c.nranks < 1 || c.rank < 0) throw new GpuckptError('JOB_REFUSED', `${name} is still being made: try again once the job runs`);
      if (c.registrations) throw new GpuckptError('JOB_REFUSED', `${name} has ${c.registrations} buffers registered with ncclCommRegister, which a communicator made again would not have; deregister them first (PyTorch: unset TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK)`);
      if (c.windows) throw new GpuckptError('JOB_REFUSED', `${name} has ${c.windows} windows from ncclCommWindowRegister (symmetric memory), which gpuckpt cannot carry across a checkpoint`);
      if (c.customOps) throw new GpuckptError('JOB_REFUSED', `${name} has ${c.customOps} reduction ops from ncclRedOpCreatePreMulSum in use, which gpuckpt cannot carry across a checkpoint`);
      const j = byKey.get(c.key) ?? { key: c.key, nranks: c.nranks, pids: new Map<number, number>() };
      byKey.set(c.key, j);
      if (j.nranks !== c.nranks || j.pids.has(c.rank)) throw new GpuckptError('JOB_REFUSED', `${name} disagrees with process ${j.pids.get(c.rank) ?? '?'} about its ranks: not one NCCL communicator gpuckpt can carry`);
      j.pids.set(c.rank, pid);
    }
  }
  for (const j of byKey.values()) {
    if (j.pids.size === j.nranks) continue;
    const inside = [...j.pids].map(([r, p]) => `rank ${r} is process ${p}`).join(', ');
    throw new GpuckptError(
      'JOB_REFUSED',
      `NCCL communicator ${keyName(j.key)} of ${job} has ${j.nranks} ranks and only ${j.pids.size} in it (${inside}): stopping part of it would stop the others at their next collective; ${whole}`,
    );
  }
  return [...byKey.values()];
}

/**
 * The cut, held on every member through a session of its own. take() holds
 * every rank's NCCL calls and lets those behind catch up until all stand at
 * the same count on every communicator with nothing under way; the job's
 * GPUs then drain. A cut not reached in time is let go: the job runs on.
 */
export class JobCut {
  private constructor(
    private readonly sessions: Map<number, ShimSession>,
    readonly comms: JobComm[],
  ) {}

  /** undefined when the job has no communicator (nothing to cut). */
  static async take(members: number[], comms: JobComm[], opts: { timeoutMs?: number } = {}): Promise<JobCut | undefined> {
    if (!comms.length) return undefined;
    const cut = new JobCut(await openAll(members), comms);
    try {
      await cut.reach(opts.timeoutMs ?? cutTimeoutMs());
      return cut;
    } catch (e) {
      await cut.release().catch(() => undefined);
      cut.close();
      throw e;
    }
  }

  /** For a resume or restore: the cut a suspend or checkpoint left held, its communicators torn down. */
  static async attach(members: number[]): Promise<JobCut | undefined> {
    const sessions = await openAll(members);
    const ranks = await Promise.all([...sessions].map(async ([pid, s]) => ({ pid, status: await s.ncclStatus() })));
    const comms = groupComms(ranks);
    if (!comms.length) {
      for (const s of sessions.values()) s.close();
      return undefined;
    }
    const cut = new JobCut(sessions, comms);
    await cut.all((s) => s.ncclHold());
    return cut;
  }

  private async all<T>(f: (s: ShimSession, pid: number) => Promise<T>): Promise<T[]> {
    return Promise.all([...this.sessions].map(([pid, s]) => f(s, pid)));
  }

  private async reach(timeoutMs: number): Promise<void> {
    let replies = await this.all((s) => s.ncclHold());
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const targets = new Map<bigint, number>();
      for (const r of replies) for (const c of r.comms) targets.set(c.key, Math.max(targets.get(c.key) ?? 0, c.ops + c.inflight));
      const reached = replies.every((r) => r.flags & NcclFlag.REACHED && r.comms.every((c) => c.ops === targets.get(c.key)));
      if (reached) return;
      if (performance.now() > deadline) throw new GpuckptError('CUT_TIMEOUT', `the ranks did not reach a common collective boundary in ${timeoutMs / 1000} s (${this.lagging(replies, targets)}); the job runs on as it was`);
      const list = [...targets].map(([key, target]) => ({ key, target }));
      replies = await this.all((s) => s.ncclHold(list));
      await new Promise((r) => setTimeout(r, POLL_MS));
      replies = await this.all((s) => s.ncclStatus());
    }
  }

  /** Which rank waits where, for the message of a cut not reached. */
  private lagging(replies: NcclReply[], targets: Map<bigint, number>): string {
    const pids = [...this.sessions.keys()];
    const out: string[] = [];
    replies.forEach((r, i) => {
      if (r.busy) out.push(`process ${pids[i]} inside ${r.busy} NCCL call(s)`);
      for (const c of r.comms)
        if (c.ops + c.inflight < targets.get(c.key)!) out.push(`process ${pids[i]} at collective ${c.ops} of ${targets.get(c.key)} on communicator ${keyName(c.key)}`);
    });
    return out.join(', ') || 'no rank moved';
  }

  /** Destroys every communicator on every rank at once. */
  async teardown(): Promise<void> {
    await this.all((s) => s.ncclTeardown());
  }

  /** Makes every torn-down communicator again, one after another, each on all its ranks at once. */
  async rebuild(): Promise<void> {
    const ranks = await this.all(async (s, pid) => ({ pid, status: await s.ncclStatus() }));
    const down = new Set<bigint>();
    for (const r of ranks) for (const c of r.status.comms) if (c.flags & CommFlag.DOWN) down.add(c.key);
    for (const comm of this.comms) {
      if (!down.has(comm.key)) continue;
      const id = await this.sessions.get(comm.pids.get(0)!)!.ncclNewId();
      await Promise.all(
        [...comm.pids.values()].map(async (pid, i) => {
          if (i > 0) faultPoint('rebuild');
          await this.sessions.get(pid)!.ncclRebuild(comm.key, id);
        }),
      );
    }
  }

  /** Lets the ranks go on (every communicator must be up). */
  async release(): Promise<void> {
    await this.all((s) => s.ncclRelease());
  }

  /** After a failure between teardown and the end: everything made again and let go, or why not. */
  async recover(): Promise<string | undefined> {
    try {
      await this.rebuild();
      await this.release();
      return undefined;
    } catch (e) {
      return `its NCCL communicators could not be made again (${isGpuckptError(e) ? e.message : String(e)}): the ranks wait; gpuckpt resume makes them again`;
    }
  }

  close(): void {
    for (const s of this.sessions.values()) s.close();
  }
}

function groupComms(ranks: RankComms[]): JobComm[] {
  const byKey = new Map<bigint, JobComm>();
  for (const { pid, status } of ranks)
    for (const c of status.comms) {
      const j = byKey.get(c.key) ?? { key: c.key, nranks: c.nranks, pids: new Map<number, number>() };
      j.pids.set(c.rank, pid);
      byKey.set(c.key, j);
    }
  return [...byKey.values()];
}

async function openAll(members: number[]): Promise<Map<number, ShimSession>> {
  const sessions = new Map<number, ShimSession>();
  try {
    for (const pid of members) sessions.set(pid, await ShimSession.open(pid));
    return sessions;
  } catch (e) {
    for (const s of sessions.values()) s.close();
    throw e;
  }
}

/** GPUCKPT_CUT_TIMEOUT (seconds), or 10 s. */
function cutTimeoutMs(): number {
  const v = process.env.GPUCKPT_CUT_TIMEOUT;
  if (v === undefined) return DEFAULT_CUT_TIMEOUT_MS;
  const s = Number(v);
  if (!Number.isFinite(s) || s <= 0) throw new GpuckptError('BAD_ARGUMENT', `GPUCKPT_CUT_TIMEOUT="${v}" must be a number of seconds above 0`);
  return s * 1000;
}

/**
 * Makes the communicators a checkpoint tore down again on every member and
 * lets the ranks go on; why not, in a line, when that failed (the ranks
 * then wait for gpuckpt resume). Nothing to do for a job without NCCL.
 */
export async function rebuildJob(members: number[]): Promise<string | undefined> {
  let cut: JobCut | undefined;
  try {
    cut = await JobCut.attach(members);
  } catch (e) {
    return `its NCCL communicators could not be reached (${(e as Error).message})`;
  }
  if (!cut) return undefined;
  try {
    return await cut.recover();
  } finally {
    cut.close();
  }
}
