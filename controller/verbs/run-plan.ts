/**
 * What `gpuckpt run` executes: the program, resolved and checked, and the
 * environment that loads the shim with the requested pool settings. The
 * shell entry point (bin/gpuckpt) execs it, so the application keeps the
 * PID, exit status and signals it was started with.
 */
import { accessSync, constants, existsSync, statSync } from 'node:fs';
import { delimiter, join, resolve } from 'node:path';
import { GpuckptError } from '../base/errors.js';
import { JOB_NAME } from '../adapters/jobs.js';
import { parseAddress, parseSize } from '../base/units.js';
import { shellQuote } from '../base/shell-quote.js';
import { packageRoot } from '../../native/index.js';

export interface RunOptions {
  poolSize?: string;
  poolBase?: string;
  /** The job's name (GPUCKPT_JOB_NAME), for the verbs to take instead of a PID. */
  name?: string;
  /** false: no framework hook in the job's Python processes (shim/python/). */
  frameworkHook?: boolean;
}

export interface RunPlan {
  program: string;
  args: string[];
  env: Record<string, string>;
}

const CHUNK = 2n << 20n;

/** The shim `run` preloads: the package's, or GPUCKPT_SHIM (the tests' build with fault injection, say). */
export function shimPath(): string {
  const given = process.env.GPUCKPT_SHIM;
  const p = given ? resolve(given) : join(packageRoot(), 'build', 'libgpuckpt.so');
  if (!existsSync(p)) throw new GpuckptError('NO_SHIM', given ? `GPUCKPT_SHIM names no file: ${p}` : `the shim is not built (${p} is missing): run npm run build`);
  return p;
}

export function resolveProgram(name: string): string {
  const isExecutableFile = (p: string) => {
    try {
      accessSync(p, constants.X_OK);
      return statSync(p).isFile();
    } catch {
      return false;
    }
  };
  if (name.includes('/')) {
    if (!existsSync(name)) throw new GpuckptError('BAD_ARGUMENT', `program not found: ${name}`);
    if (!isExecutableFile(name)) throw new GpuckptError('BAD_ARGUMENT', `not an executable file: ${name}`);
    return resolve(name);
  }
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir && isExecutableFile(join(dir, name))) return join(dir, name);
  }
  throw new GpuckptError('BAD_ARGUMENT', `program not found in PATH: ${name}`);
}

export function makeRunPlan(command: string[], opts: RunOptions): RunPlan {
  if (command.length === 0) throw new GpuckptError('BAD_ARGUMENT', 'no program given (usage: gpuckpt run [options] -- PROGRAM [ARGS...])');
  const env: Record<string, string> = {};
  if (opts.poolSize !== undefined) {
    const size = parseSize(opts.poolSize, '--pool-size');
    if (size < CHUNK) throw new GpuckptError('BAD_ARGUMENT', '--pool-size must be at least 2M');
    env.GPUCKPT_POOL_SIZE = size.toString();
  }
  if (opts.poolBase !== undefined) {
    const base = parseAddress(opts.poolBase, '--pool-base');
    if (base % CHUNK !== 0n) throw new GpuckptError('BAD_ARGUMENT', '--pool-base must be a multiple of 2 MiB (0x200000)');
    env.GPUCKPT_POOL_BASE = '0x' + base.toString(16);
  }
  if (opts.name !== undefined) {
    if (!JOB_NAME.test(opts.name)) throw new GpuckptError('BAD_ARGUMENT', `--name "${opts.name}" must start with a letter and hold only letters, digits, _ . - (at most 64)`);
    env.GPUCKPT_JOB_NAME = opts.name;
  }
  if (opts.frameworkHook !== false) {
    // Python programs start the hook that tells images what PyTorch holds unused.
    const hook = join(packageRoot(), 'shim', 'python');
    const path = process.env.PYTHONPATH;
    env.PYTHONPATH = path ? `${hook}${delimiter}${path}` : hook;
  }
  const shim = shimPath();
  const preload = process.env.LD_PRELOAD;
  env.LD_PRELOAD = preload ? `${shim} ${preload}` : shim;
  return { program: resolveProgram(command[0]!), args: command.slice(1), env };
}

/**
 * The plan as sh code for bin/gpuckpt to eval: exports, then exec. The
 * job's id is the PID the program keeps ($$, the shell's, which execs it);
 * every process it starts inherits it (adapters/jobs.ts).
 */
export function planAsShell(plan: RunPlan): string {
  const lines = Object.entries(plan.env).map(([k, v]) => `export ${k}=${shellQuote(v)}`);
  lines.push('export GPUCKPT_JOB=$$');
  lines.push(`exec ${[plan.program, ...plan.args].map(shellQuote).join(' ')}`);
  return lines.join('\n') + '\n';
}
