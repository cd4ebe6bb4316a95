/**
 * CRIU, the process checkpointer gpuckpt relies on for everything outside
 * the GPU: found on PATH, or given by --criu / GPUCKPT_CRIU; version 4.0 or
 * newer (3.x fails on current kernels). Runs with a log in the image, and
 * failures report CRIU's first error line and a log that is kept.
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { release } from 'node:os';
import { delimiter, join } from 'node:path';
import { GpuckptError } from '../base/errors.js';
import { logsDir } from './run-dir.js';
import { packageRoot } from '../../native/index.js';

export interface Criu {
  path: string;
  version: string;
  /** Preloaded into it: CRIU before 4.2 on Linux 6.16+ (native/criu-compat/criu_compat.c). */
  compat?: string;
}

/** CRIU before 4.2 reads SO_PASSCRED from TCP and UDP sockets, which Linux refuses since 6.16 (CRIU's commit 4b73985). */
export function criuAsksPasscredOnInet(version: string): boolean {
  const [maj = 0, min = 0] = release().split('.').map(Number);
  const [cmaj = 0, cmin = 0] = version.split('.').map(Number);
  return (maj > 6 || (maj === 6 && min >= 16)) && (cmaj < 4 || (cmaj === 4 && cmin < 2));
}

/** CRIU's action script that marks the end of a restore (libexec/criu-resumed). */
const RESUMED_SCRIPT = join(packageRoot(), 'libexec', 'criu-resumed');

/**
 * The environment CRIU runs in: ours, with the compat library preloaded
 * where it is needed, and GPUCKPT_RUNS_CRIU, which tells gpuckpt's own
 * CRIU plugin, if CRIU loads it from its default directory, that the GPU
 * is taken care of.
 */
function criuEnv(criu: Criu): NodeJS.ProcessEnv {
  const env = { ...process.env, GPUCKPT_RUNS_CRIU: '1' };
  if (!criu.compat) return env;
  const preload = process.env.LD_PRELOAD;
  return { ...env, LD_PRELOAD: preload ? `${criu.compat} ${preload}` : criu.compat };
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
  const compat = join(packageRoot(), 'build', 'gpuckpt-criu-compat.so');
  return { path, version, ...(criuAsksPasscredOnInet(version) && existsSync(compat) ? { compat } : {}) };
}

/**
 * CRIU's first real error: the cause, where later lines report its
 * consequences ("Dumping FAILED"). Its RLIMIT_NOFILE complaint, which CRIU
 * makes and survives as an unprivileged user, is no cause.
 */
function firstError(log: string): string {
  try {
    const line = readFileSync(log, 'utf8')
      .split('\n')
      .find((l) => /Error \(/.test(l) && !/RLIMIT_NOFILE/.test(l));
    return line ? line.replace(/^\([\d.]+\)\s*/, '').replace(/^\d+: /, '') : 'see the log';
  } catch {
    return 'no log';
  }
}

/**
 * A copy of a failed dump's or restore's log that outlives its working
 * directory: <run dir>/logs/criu-WHAT-TIME.log (the newest 20 kept).
 */
function keepLog(log: string, what: string): string {
  const dir = logsDir();
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const kept = join(dir, `criu-${what}-${new Date().toISOString().replace(/[:.]/g, '-')}.log`);
    copyFileSync(log, kept);
    const old = readdirSync(dir).filter((n) => n.startsWith('criu-')).sort((a, b) => statSync(join(dir, a)).mtimeMs - statSync(join(dir, b)).mtimeMs);
    for (const n of old.slice(0, Math.max(0, old.length - KEPT_LOGS))) rmSync(join(dir, n), { force: true });
    return kept;
  } catch {
    return log;
  }
}

const KEPT_LOGS = 20;

/** `criu dump` of root's tree into dir, with args (dump-plan.ts) and the user's own options. */
export function criuDump(criu: Criu, root: number, dir: string, opts: { leaveRunning: boolean; args: string[] }): void {
  const args = ['dump', '-t', String(root), '-D', dir, '-o', 'dump.log', '-v4', ...opts.args];
  if (opts.leaveRunning) args.push('--leave-running');
  const r = spawnSync(criu.path, args, { stdio: ['ignore', 'ignore', 'pipe'], encoding: 'utf8', env: criuEnv(criu) });
  if (r.status !== 0) {
    const log = join(dir, 'dump.log');
    throw new GpuckptError('CRIU_FAILED', `criu dump of process ${root} failed: ${existsSync(log) ? firstError(log) : (r.stderr || r.error?.message || '').trim().split('\n')[0]} (log: ${keepLog(log, `dump-${root}`)})`);
  }
}

/** An fd of this process that `criu restore` takes for a resource of the image (--inherit-fd). */
export interface InheritedFd {
  fd: number;
  /** 'pipe:[123]', 'socket:[123]' or a path without its leading '/'. */
  resource: string;
}

/**
 * Starts `criu restore`. Detached, it returns once the process tree is back;
 * attached, CRIU stays the restored process's parent and exits with its
 * status, which the returned child reports. A terminal job gets this
 * command's terminal; inherit fds go to CRIU from fd 3 on. CRIU ignores
 * SIGINT and SIGQUIT, which a terminal sends the restored job itself (the
 * job's own dispositions come back from the image).
 */
function criuRestore(
  criu: Criu,
  dir: string,
  opts: { detach: boolean; shellJob: boolean; terminal: boolean; pidFile: string; resumedFile: string; inherit: InheritedFd[]; args: string[] },
): ChildProcess {
  const args = ['restore', '-D', dir, '-o', 'restore.log', '-v4', '--pidfile', opts.pidFile, '--action-script', RESUMED_SCRIPT, ...opts.args];
  if (opts.detach) args.push('--restore-detached');
  if (opts.shellJob) args.push('--shell-job');
  opts.inherit.forEach((h, i) => args.push('--inherit-fd', `fd[${3 + i}]:${h.resource}`));
  const std: ('inherit' | 'ignore' | 'pipe')[] = opts.terminal ? ['inherit', 'inherit', 'inherit'] : ['ignore', 'ignore', 'pipe'];
  const env = { ...criuEnv(criu), GPUCKPT_CRIU_RESUMED: opts.resumedFile };
  return spawn('/bin/sh', ['-c', 'trap "" INT QUIT; exec "$0" "$@"', criu.path, ...args], { stdio: [...std, ...opts.inherit.map((h) => h.fd)], env });
}

/** How a process that CRIU restored attached ended. */
export type ChildExit = { code: number | null; signal: string | null };

/**
 * `criu restore` of the image's dir: returns once the processes run
 * (detached: CRIU exited; attached: its action script said so at
 * post-resume), with CRIU's exit to come (attached: when the application
 * ends). Not at the pidfile: CRIU writes it as it forks the root, before
 * anything is restored, and the images must stay until it is done.
 */
export async function criuRestoreTree(
  criu: Criu,
  dir: string,
  image: string,
  opts: { detach: boolean; shellJob: boolean; terminal: boolean; inherit: InheritedFd[]; args: string[] },
): Promise<{ done: Promise<ChildExit> }> {
  const { detach } = opts;
  const pidFile = join(dir, `restore-${process.pid}.pid`);
  const resumedFile = join(dir, `resumed-${process.pid}`);
  const child = criuRestore(criu, dir, { ...opts, pidFile, resumedFile });
  let exited: ChildExit | undefined;
  const done = new Promise<ChildExit>((res) => child.on('exit', (code, signal) => res((exited = { code, signal }))));
  while (!exited && (detach || !existsSync(resumedFile))) await new Promise((r) => setTimeout(r, 20));
  // Attached, CRIU may have exited already with the application's status.
  const restored = existsSync(pidFile) && (detach ? exited!.code === 0 : existsSync(resumedFile));
  rmSync(pidFile, { force: true });
  rmSync(resumedFile, { force: true });
  if (!restored)
    throw new GpuckptError('CRIU_FAILED', `criu restore of ${image} failed: ${firstError(join(dir, 'restore.log'))} (log: ${keepLog(join(dir, 'restore.log'), 'restore')})`);
  // Wrapped: an async function returning the promise itself would wait for it.
  return { done };
}
