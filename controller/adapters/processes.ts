/** Facts about other processes, read from /proc; and the first word of a helper we start. */
import type { ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { constants } from 'node:os';
import { GpuckptError } from '../base/errors.js';
import { isAlive } from '../base/pid-alive.js';
import { native } from '../../native/index.js';

export function parsePid(text: string): number {
  if (!/^[1-9][0-9]{0,9}$/.test(text)) throw new GpuckptError('BAD_ARGUMENT', `"${text}" is not a process ID`);
  const pid = Number(text);
  if (pid > 4194304) throw new GpuckptError('BAD_ARGUMENT', `${pid} is not a valid process ID`);
  return pid;
}

export function commandLine(pid: number): string[] {
  try {
    const raw = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    return raw.split('\0').filter((s, i, a) => s !== '' || i < a.length - 1);
  } catch {
    return [];
  }
}

/** The fields of /proc/PID/status, each value's words; undefined when there is no such process. */
export function processStatus(pid: number): Record<string, string[]> | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return undefined;
  }
  const fields: Record<string, string[]> = {};
  for (const line of text.split('\n')) {
    const colon = line.indexOf(':');
    if (colon > 0) fields[line.slice(0, colon)] = line.slice(colon + 1).trim().split(/\s+/);
  }
  return fields;
}

/** Memory of pid that a dump of it copies at most (VmRSS, and VmSwap), in bytes; 0 when unknown. */
export function residentBytes(pid: number): number {
  const status = processStatus(pid);
  const kB = (field: string) => Number(status?.[field]?.[0] ?? 0);
  return (kB('VmRSS') + kB('VmSwap')) * 1024;
}

export function processUid(pid: number): number | undefined {
  const uid = processStatus(pid)?.Uid?.[0];
  return uid ? Number(uid) : undefined;
}

/** pid as its own PID namespace numbers it, when that is another one. */
export function innerPid(pid: number): number | undefined {
  const ids = processStatus(pid)?.NSpid;
  const inner = ids && ids.length > 1 ? Number(ids[ids.length - 1]) : undefined;
  return inner !== undefined && Number.isInteger(inner) ? inner : undefined;
}

/**
 * When the process started (field 22 of /proc/PID/stat, in clock ticks
 * since boot): with the PID, it names one process even after the PID is
 * reused. undefined when there is no such process.
 */
export function startTime(pid: number): string | undefined {
  return statAfterName(pid)?.[19];
}

/** startTime of a process that has not ended: undefined for a zombie too (ended, not yet reaped). */
export function runningStartTime(pid: number): string | undefined {
  const fields = statAfterName(pid);
  return fields && fields[0] !== 'Z' ? fields[19] : undefined;
}

/** /proc/PID/stat from field 3 (the state) on. */
export function statAfterName(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses: the last ')' ends it.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

/** True when libgpuckpt.so is mapped into the process. */
export function hasShimLoaded(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/maps`, 'utf8').includes('libgpuckpt.so');
  } catch {
    return false;
  }
}

/**
 * Refuses while a PID of the tree is taken: CRIU restores each process
 * under its own. A process that ended but is not reaped yet (its parent,
 * often init, will) is waited for a little.
 */
export async function waitPidsFree(tree: number[]): Promise<void> {
  for (let waited = 0; ; waited += 50) {
    const busy = tree.find((p) => isAlive(p));
    if (busy === undefined) return;
    const ended = runningStartTime(busy) === undefined;
    if (!ended || waited >= ZOMBIE_WAIT_MS) {
      const how = `CRIU restores ${tree.length > 1 ? "the job's processes under their own PIDs" : 'a process under its own PID'}`;
      throw new GpuckptError('PID_IN_USE', ended ? `process ${busy} has ended but its parent has not reaped it, so its PID is not free: ${how}` : `process ${busy} is running: ${how}, which must be free`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

const ZOMBIE_WAIT_MS = 3000;

/** SIGKILL to a process this command started or brought back (gone already: nothing to do). */
export function killProcess(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // ESRCH: it ended on its own
  }
}

/** How a process ended: its exit code, or the signal that ended it (name and number); all null when that is not known. */
export type ChildExit = { code: number | null; signal: string | null; signalNumber: number | null };

/** A ChildExit from what Node or waitid reports. */
export function exitOf(code: number | null, signal: string | number | null): ChildExit {
  if (signal === null) return { code, signal: null, signalNumber: null };
  if (typeof signal === 'string') return { code: null, signal, signalNumber: constants.signals[signal as NodeJS.Signals] ?? null };
  return { code: null, signal: Object.entries(constants.signals).find(([, n]) => n === signal)?.[0] ?? `SIG${signal}`, signalNumber: signal };
}

/**
 * The end of pid, a child of this process that libuv did not start (the
 * root of a tree CRIU restored as our sibling's). When it is not a child
 * after all (a CRIU run through a wrapper such as sudo), its end alone:
 * the status is then not known.
 */
export async function waitChildEnd(pid: number): Promise<ChildExit> {
  const started = runningStartTime(pid);
  try {
    const end = await native().waitChild(pid);
    return exitOf(end.code, end.signal);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ECHILD') throw new GpuckptError('INTERNAL', `cannot wait for process ${pid}: ${(e as Error).message}`);
    while (started !== undefined && runningStartTime(pid) === started) await new Promise((r) => setTimeout(r, 100));
    return { code: null, signal: null, signalNumber: null };
  }
}

/** Reaps pid once it ends if it is a child of this process (a restored root CRIU killed); nothing otherwise. */
export function reapIfChild(pid: number): void {
  native()
    .waitChild(pid)
    .catch(() => undefined);
}

/**
 * Waits for done, the end of pid (a job this command runs attached), as a
 * shell waits for a foreground job: a terminal's Ctrl-C or Ctrl-\ is the job's to act on, not this
 * command's (it reaches the job directly); a SIGTERM or SIGHUP sent to
 * this command is passed on to the job.
 */
export async function waitAsForeground<T>(done: Promise<T>, pid: number): Promise<T> {
  const ignore = () => undefined;
  const pass = (sig: NodeJS.Signals) => () => {
    try {
      process.kill(pid, sig);
    } catch {
      // ended already
    }
  };
  const onTerm = pass('SIGTERM');
  const onHup = pass('SIGHUP');
  process.on('SIGINT', ignore).on('SIGQUIT', ignore).on('SIGTERM', onTerm).on('SIGHUP', onHup);
  try {
    return await done;
  } finally {
    process.off('SIGINT', ignore).off('SIGQUIT', ignore).off('SIGTERM', onTerm).off('SIGHUP', onHup);
  }
}

/**
 * The first line a helper program we started writes on its stdout (the
 * driver keeper's and the snapshot holder's word on starting: "ready"),
 * or "failed: ..." saying how it ended without one.
 */
export function firstLine(child: ChildProcess): Promise<string> {
  return new Promise((resolve) => {
    let out = '';
    child.stdout!.setEncoding('utf8');
    child.stdout!.on('data', (d: string) => {
      out += d;
      if (out.includes('\n')) resolve(out.slice(0, out.indexOf('\n')));
    });
    child.once('error', (e) => resolve(`failed: ${e.message}`));
    // 'close', not 'exit': by then what it wrote has been read.
    child.once('close', (code, signal) => resolve(`failed: it ended (${signal ?? `status ${code}`}) without a word`));
  });
}
