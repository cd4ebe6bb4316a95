/**
 * Jobs: every process started under one `gpuckpt run` (a launcher such as
 * torchrun and all the ranks it starts) carries GPUCKPT_JOB, the
 * launcher's PID, and GPUCKPT_JOB_NAME when run was given --name. Read from
 * /proc/PID/environ (a process of this user).
 */
import { existsSync, readFileSync } from 'node:fs';
import { runningStartTime } from './processes.js';
import { socketCandidates } from './run-dir.js';

/** What a job's --name may be (it stands where a PID does). */
export const JOB_NAME = /^[A-Za-z][A-Za-z0-9_.-]{0,63}$/;

export interface JobTag {
  /** The launcher's PID: the job's id. */
  launcher: number;
  name?: string;
}

export function jobOf(pid: number): JobTag | undefined {
  let raw: string;
  try {
    raw = readFileSync(`/proc/${pid}/environ`, 'latin1');
  } catch {
    return undefined;
  }
  let launcher: number | undefined;
  let name: string | undefined;
  for (const kv of raw.split('\0')) {
    if (kv.startsWith('GPUCKPT_JOB=')) launcher = Number(kv.slice(12));
    else if (kv.startsWith('GPUCKPT_JOB_NAME=')) name = kv.slice(17);
  }
  return launcher && Number.isInteger(launcher) ? { launcher, ...(name ? { name } : {}) } : undefined;
}

/** The launcher of a running job named name, among pids. */
export function findJobByName(name: string, pids: number[]): number | undefined {
  for (const pid of pids) {
    const tag = jobOf(pid);
    if (tag?.name === name && runningStartTime(tag.launcher) !== undefined) return tag.launcher;
  }
  return undefined;
}

/** The process runs CUDA under gpuckpt: its shim answers on a control socket. */
export function isCudaMember(pid: number): boolean {
  return socketCandidates(pid).some((p) => existsSync(p));
}
