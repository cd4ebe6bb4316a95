/**
 * CRIU, the process checkpointer gpuckpt relies on for everything outside
 * the GPU: found on PATH, or given by --criu / GPUCKPT_CRIU; version 4.0 or
 * newer (3.x fails on current kernels). Runs with a log in the image, and
 * failures report CRIU's own last error line.
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, readlinkSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { GpuckptError } from './errors.js';

export interface Criu {
  path: string;
  version: string;
}

export function findCriu(given?: string): Criu {
  const candidates = given ? [given] : process.env.GPUCKPT_CRIU ? [process.env.GPUCKPT_CRIU] : (process.env.PATH ?? '').split(delimiter).filter(Boolean).map((d) => join(d, 'criu'));
  const path = candidates.find((p) => existsSync(p));
  if (!path) throw new GpuckptError('NO_CRIU', given || process.env.GPUCKPT_CRIU ? `CRIU not found at ${given ?? process.env.GPUCKPT_CRIU}` : 'CRIU not found on PATH (install CRIU 4.0 or newer, or give --criu PATH)');
  let out = '';
  try {
    out = execFileSync(path, ['--version'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    throw new GpuckptError('NO_CRIU', `${path} --version failed: ${(e as Error).message.split('\n')[0]}`);
  }
  const m = out.match(/Version:\s*(\d+)\.(\d+)(?:\.(\d+))?/);
  if (!m) throw new GpuckptError('NO_CRIU', `${path} does not look like CRIU (no version in its --version output)`);
  const version = `${m[1]}.${m[2]}${m[3] ? `.${m[3]}` : ''}`;
  if (Number(m[1]) < 4) throw new GpuckptError('NO_CRIU', `CRIU ${version} at ${path} is too old: 4.0 or newer is needed`);
  return { path, version };
}

/** True when the process's stdin is a terminal: CRIU must treat it as a shell job. */
export function isShellJob(pid: number): boolean {
  try {
    return /^\/dev\/(pts\/\d+|tty)/.test(readlinkSync(`/proc/${pid}/fd/0`));
  } catch {
    return false;
  }
}

function lastError(log: string): string {
  try {
    const lines = readFileSync(log, 'utf8').split('\n').filter((l) => /Error \(/.test(l) && !/RLIMIT_NOFILE/.test(l));
    const last = lines[lines.length - 1];
    return last ? last.replace(/^\([\d.]+\)\s*/, '') : 'see the log';
  } catch {
    return 'no log';
  }
}

export function criuDump(criu: Criu, pid: number, dir: string, opts: { leaveRunning: boolean; shellJob: boolean }): void {
  const args = ['dump', '-t', String(pid), '-D', dir, '-o', 'dump.log', '-v4'];
  if (opts.leaveRunning) args.push('--leave-running');
  if (opts.shellJob) args.push('--shell-job');
  const r = spawnSync(criu.path, args, { stdio: ['ignore', 'ignore', 'pipe'], encoding: 'utf8' });
  if (r.status !== 0)
    throw new GpuckptError('CRIU_FAILED', `criu dump of process ${pid} failed: ${lastError(join(dir, 'dump.log'))} (log: ${join(dir, 'dump.log')})`);
}

/**
 * Starts `criu restore`. Detached, it returns once the process tree is back;
 * attached, CRIU stays the restored process's parent and exits with its
 * status, which the returned child reports.
 */
export function criuRestore(criu: Criu, dir: string, opts: { detach: boolean; shellJob: boolean; pidFile: string }): ChildProcess {
  const args = ['restore', '-D', dir, '-o', 'restore.log', '-v4', '--pidfile', opts.pidFile];
  if (opts.detach) args.push('--restore-detached');
  if (opts.shellJob) args.push('--shell-job');
  return spawn(criu.path, args, { stdio: opts.shellJob ? 'inherit' : ['ignore', 'ignore', 'pipe'] });
}

export function criuRestoreError(dir: string): string {
  return lastError(join(dir, 'restore.log'));
}
