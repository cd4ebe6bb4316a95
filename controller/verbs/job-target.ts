/** What the verbs take: a PID, or the --name of a job started with gpuckpt run. */
import { readdirSync } from 'node:fs';
import { GpuckptError } from '../base/errors.js';
import { findJobByName, JOB_NAME } from '../adapters/jobs.js';
import { parsePid } from '../adapters/processes.js';
import { ownRunDir } from '../adapters/run-dir.js';

export function parseTarget(text: string): number {
  if (/^[0-9]+$/.test(text)) return parsePid(text);
  if (!JOB_NAME.test(text)) throw new GpuckptError('BAD_ARGUMENT', `"${text}" is not a process ID (nor a job name)`);
  let pids: number[] = [];
  try {
    pids = readdirSync(ownRunDir())
      .map((n) => /^([0-9]+)\.sock$/.exec(n)?.[1])
      .filter((p): p is string => !!p)
      .map(Number);
  } catch {
    // no run directory: no job of this user runs
  }
  const launcher = findJobByName(text, pids);
  if (launcher === undefined) throw new GpuckptError('PID_NOT_RUNNING', `"${text}" is not a process ID, and no running job is named so (gpuckpt ps lists them)`);
  return launcher;
}
