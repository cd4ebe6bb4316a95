/**
 * CRIU, the process checkpointer gpuckpt relies on for everything outside
 * the GPU: found on PATH, or given by --criu / GPUCKPT_CRIU; version 4.0 or
 * newer (3.x fails on current kernels). Runs with a log in the image, and
 * failures report CRIU's first error line and a log that is kept.
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { release } from 'node:os';
import { delimiter, join, resolve } from 'node:path';
import { GpuckptError } from '../base/errors.js';
import { CriuGate } from './criu-gate.js';
import { exitOf, killProcess, reapIfChild, waitChildEnd, type ChildExit } from './processes.js';
import { logsDir } from './run-dir.js';
import { log, logEnabled } from '../base/log.js';
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
 * A copy of a failed (or, at debug, any) restore's log, or a failed dump's,
 * that outlives its working directory: <run dir>/logs/criu-WHAT-TIME.log
 * (the newest 20 kept).
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

/** CRIU's arguments for a dump of root's tree into dir, its log into logDir, with args (dump-plan.ts) and the user's own options. */
function dumpArgs(root: number, dir: string, logDir: string, args: string[]): string[] {
  return ['dump', '-t', String(root), '-D', dir, '-o', resolve(logDir, 'dump.log'), verbosity(), ...args];
}

/** CRIU's log level: GPUCKPT_CRIU_VERBOSITY (4: every step, stamped), else CRIU_VERBOSITY. */
function verbosity(): string {
  return `-v${process.env.GPUCKPT_CRIU_VERBOSITY || CRIU_VERBOSITY}`;
}

/** Info: what CRIU did, each line stamped (3,500 lines for the PyTorch job's dump); 4 adds each page run (34,000), 0.1 s of its dump. */
const CRIU_VERBOSITY = 3;

/**
 * CRIU started through a shell that ignores SIGINT and SIGQUIT, which a
 * terminal sends its whole process group: they are gpuckpt's to act on, or
 * the restored job's (whose own dispositions come back from the image).
 */
function spawnDeafToTerminal(criu: Criu, args: string[], stdio: ('inherit' | 'ignore' | 'pipe' | number)[]): ChildProcess {
  return spawn('/bin/sh', ['-c', 'trap "" INT QUIT; exec "$0" "$@"', criu.path, ...args], { stdio, env: criuEnv(criu) });
}

/** `criu dump` of root's tree into dir (its log into logDir), with args (dump-plan.ts) and the user's own options. */
export function criuDump(criu: Criu, root: number, dir: string, opts: { leaveRunning: boolean; args: string[]; logDir?: string }): void {
  const logDir = opts.logDir ?? dir;
  const args = dumpArgs(root, dir, logDir, opts.args);
  if (opts.leaveRunning) args.push('--leave-running');
  const r = spawnSync(criu.path, args, { stdio: ['ignore', 'ignore', 'pipe'], encoding: 'utf8', env: criuEnv(criu) });
  if (r.status !== 0) throw dumpFailed(root, logDir, r.stderr || r.error?.message || '');
}

function dumpFailed(root: number, logDir: string, stderr: string): GpuckptError {
  const log = join(logDir, 'dump.log');
  return new GpuckptError('CRIU_FAILED', `criu dump of process ${root} failed: ${existsSync(log) ? firstError(log) : stderr.trim().split('\n')[0]} (log: ${keepLog(log, `dump-${root}`)})`);
}

/**
 * `criu dump` of root's tree, which CRIU then ends, but only once
 * whenDumped (run when CRIU has written its files, the tree still frozen)
 * has made the image complete; if that fails, or this process dies
 * meanwhile, CRIU lets the tree run on (criu-gate.ts) and the failure is
 * thrown. A CRIU failure is thrown as criuDump's; the tree runs on then too.
 * Resolves with a note when CRIU failed after the image was complete.
 * CRIU's log goes into logDir.
 */
export async function criuDumpGated(criu: Criu, root: number, dir: string, args: string[], whenDumped: () => Promise<void>, logDir = dir): Promise<string | undefined> {
  const gate = CriuGate.open('post-dump');
  try {
    // A terminal's Ctrl-C is gpuckpt's to act on (its answer at the gate), not CRIU's, nor its script's.
    const child = spawnDeafToTerminal(criu, [...dumpArgs(root, dir, logDir, args), '--action-script', gate.script], ['ignore', 'ignore', 'pipe']);
    let stderr = '';
    child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    let exited: ChildExit | undefined;
    const ended = new Promise<ChildExit>((resolve) => {
      child.once('error', (e) => ((stderr += e.message), resolve((exited = exitOf(null, null)))));
      child.once('close', (code, signal) => resolve((exited = exitOf(code, signal))));
    });
    // The script says when CRIU has written its files: polled, a few ms at most.
    while (!exited && !gate.reached) await new Promise((r) => setTimeout(r, 5));
    if (!gate.reached) {
      if (exited!.code !== 0) throw dumpFailed(root, logDir, stderr);
      // A CRIU that ran no post-dump script has ended the tree already.
      await whenDumped();
      return undefined;
    }
    let failure: unknown;
    try {
      await whenDumped();
    } catch (e) {
      failure = e;
    }
    gate.answer(failure === undefined);
    const end = await ended;
    if (failure !== undefined) throw failure;
    return end.code === 0 ? undefined : `criu dump ended with ${end.signal ?? `status ${end.code}`} after the image was complete: ${dumpFailed(root, logDir, stderr).message}`;
  } finally {
    gate.close();
  }
}

/** An fd of this process that `criu restore` takes for a resource of the image (--inherit-fd). */
export interface InheritedFd {
  fd: number;
  /** 'pipe:[123]', 'socket:[123]' or a path without its leading '/'. */
  resource: string;
}

/**
 * Starts `criu restore`, detached: CRIU exits once the process tree runs.
 * For an attached restore the tree's root comes back as this process's
 * child (--restore-sibling), so that its exit status is had (an attached
 * CRIU would reap it and exit 0 whatever it was). A terminal job gets this
 * command's terminal; inherit fds go to CRIU from fd 3 on.
 */
function criuRestore(
  criu: Criu,
  dir: string,
  opts: { detach: boolean; shellJob: boolean; terminal: boolean; pidFile: string; gate: string; inherit: InheritedFd[]; args: string[] },
): ChildProcess {
  const args = ['restore', '-D', dir, '-o', 'restore.log', verbosity(), '--pidfile', opts.pidFile, '--restore-detached', '--action-script', opts.gate, ...opts.args];
  if (!opts.detach) args.push('--restore-sibling');
  if (opts.shellJob) args.push('--shell-job');
  opts.inherit.forEach((h, i) => args.push('--inherit-fd', `fd[${3 + i}]:${h.resource}`));
  const std: ('inherit' | 'ignore' | 'pipe')[] = opts.terminal ? ['inherit', 'inherit', 'inherit'] : ['ignore', 'ignore', 'pipe'];
  return spawnDeafToTerminal(criu, args, [...std, ...opts.inherit.map((h) => h.fd)]);
}

/**
 * `criu restore` of the image's dir: returns once CRIU is done and the
 * processes run, with, attached, the end of the tree's root to come. Not
 * at the pidfile: CRIU writes it before the tree is released, and the
 * images must stay until CRIU is done with them. CRIU holds the processes
 * it brought back, none of them run yet, until `until` resolves (the
 * post-restore gate, criu-gate.ts); if it rejects, CRIU ends them, and its
 * reason is thrown.
 */
export async function criuRestoreTree(
  criu: Criu,
  dir: string,
  image: string,
  opts: { detach: boolean; shellJob: boolean; terminal: boolean; inherit: InheritedFd[]; args: string[]; until: Promise<unknown> },
): Promise<{ done: Promise<ChildExit> }> {
  const pidFile = join(dir, `restore-${process.pid}.pid`);
  const gate = CriuGate.open('post-restore');
  try {
    opts.until.then(
      () => gate.answer(true),
      () => gate.answer(false),
    );
    const exit = await new Promise<ChildExit>((res) => criuRestore(criu, dir, { ...opts, pidFile, gate: gate.script }).on('exit', (code, signal) => res(exitOf(code, signal))));
    const root = existsSync(pidFile) ? Number(readFileSync(pidFile, 'utf8').trim()) : 0;
    rmSync(pidFile, { force: true });
    if (exit.code !== 0 || !(root > 0)) {
      // A root CRIU made as our child: ended (CRIU's failure ends the tree, as
      // it should here), and reaped rather than left a zombie holding its PID.
      if (root > 0 && !opts.detach) {
        killProcess(root);
        reapIfChild(root);
      }
      await opts.until; // refused at the gate: that is the reason
      throw new GpuckptError('CRIU_FAILED', `criu restore of ${image} failed: ${firstError(join(dir, 'restore.log'))} (log: ${keepLog(join(dir, 'restore.log'), 'restore')})`);
    }
    // At debug a restore's log outlives the scratch directory: where CRIU's time went.
    if (logEnabled('debug')) log('debug', 'criu', `restore log kept at ${keepLog(join(dir, 'restore.log'), 'restore')}`);
    // Wrapped: an async function returning the promise itself would wait for it.
    return { done: opts.detach ? Promise.resolve(exit) : waitChildEnd(root) };
  } finally {
    gate.close();
  }
}
