/**
 * Processes running under gpuckpt: every live control socket of this
 * user, and those of processes in containers (other PID namespaces) it can
 * reach, with the job each belongs to.
 */
import { readdirSync, unlinkSync } from 'node:fs';
import { isGpuckptError } from '../base/errors.js';
import { ShimSession } from '../adapters/session.js';
import { commandLine } from '../adapters/processes.js';
import { isAlive } from '../base/pid-alive.js';
import { containedShimPids, ownRunDir, socketPath } from '../adapters/run-dir.js';
import { CommFlag, type OutsidePool } from '../../native/index.js';
import { jobOf, type JobTag } from '../adapters/jobs.js';
import { listGpuSnapshots, type HeldSnapshot } from './gpu-held.js';

export interface ProcessRow {
  pid: number;
  command: string[];
  poolState: 'active' | 'not-yet' | 'disabled' | 'suspended' | 'half-restored';
  poolBase: bigint;
  sliceSize: bigint;
  gate: 'open' | 'closed';
  /** Driver calls the application made through the gate since it started. */
  driverCalls: bigint;
  devices: { device: number; bytesInUse: bigint; bytesMapped: bigint; allocations: number }[];
  outsidePool: OutsidePool;
  /** The job it belongs to (gpuckpt run's launcher), if started under a run that set one. */
  job?: JobTag;
  /** Its NCCL communicators: its rank in each, of how many; down while a checkpoint has them torn down. */
  nccl: { rank: number; nranks: number; down: boolean }[];
  /** Its snapshots held in GPU memory (checkpoint --to-gpu), oldest first. */
  gpuSnapshots: HeldSnapshot[];
  error?: string;
}

const POOL_STATES = ['not-yet', 'active', 'disabled', 'suspended', 'half-restored'] as const;

export async function listProcesses(runDir = ownRunDir()): Promise<ProcessRow[]> {
  let names: string[] = [];
  try {
    names = readdirSync(runDir);
  } catch {
    // none of ours; contained ones may still be
  }
  const own = names
    .map((n) => n.match(/^([0-9]+)\.sock$/))
    .filter((m): m is RegExpMatchArray => !!m)
    .map((m) => Number(m[1]));
  const pids = [...new Set([...own, ...containedShimPids()])].sort((a, b) => a - b);
  const snapshots = pids.length ? await listGpuSnapshots(runDir) : [];
  const rows: ProcessRow[] = [];
  for (const pid of pids) {
    if (!isAlive(pid)) {
      // The process died without its exit handlers (SIGKILL): tidy up.
      try {
        unlinkSync(socketPath(runDir, pid));
      } catch {
        /* already gone */
      }
      continue;
    }
    const row = await describe(pid);
    if (row) rows.push({ ...row, gpuSnapshots: snapshots.filter((s) => s.pid === pid) });
  }
  return rows;
}

/** pid's row; undefined when its socket is not its own (a contained process's, listed by its PID here). */
async function describe(pid: number): Promise<Omit<ProcessRow, 'gpuSnapshots'> | undefined> {
  const base: Omit<ProcessRow, 'gpuSnapshots'> = {
    pid,
    command: commandLine(pid),
    poolState: 'not-yet',
    poolBase: 0n,
    sliceSize: 0n,
    gate: 'open',
    driverCalls: 0n,
    devices: [],
    outsidePool: { managed: 0n, streamOrdered: 0n, host: 0n, unrouted: 0n },
    job: jobOf(pid),
    nccl: [],
  };
  let session: ShimSession | undefined;
  try {
    session = await ShimSession.open(pid);
    const st = await session.status();
    const comms = (await session.ncclStatus()).comms;
    return {
      ...base,
      poolState: POOL_STATES[st.poolState] ?? 'not-yet',
      poolBase: session.hello.poolBase,
      sliceSize: session.hello.sliceSize,
      gate: st.gateClosed ? 'closed' : 'open',
      driverCalls: st.gatedCalls,
      devices: st.devices.map((d, i) => ({ device: i, ...d })),
      outsidePool: st.outsidePool,
      nccl: comms.map((c) => ({ rank: c.rank, nranks: c.nranks, down: !!(c.flags & CommFlag.DOWN) })),
    };
  } catch (e) {
    if (isGpuckptError(e, 'NOT_UNDER_GPUCKPT')) return undefined;
    return { ...base, error: (e as Error).message };
  } finally {
    session?.close();
  }
}
