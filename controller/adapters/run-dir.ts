/**
 * Where a process's control socket lives. The shim (shim/interpose/config.c)
 * computes the same directory from the same variables; when the target's
 * environment differs from ours, it is read from /proc/PID/environ.
 */
import { existsSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface RunDirEnv {
  GPUCKPT_RUN_DIR?: string;
  XDG_RUNTIME_DIR?: string;
}

export function runDirFor(env: RunDirEnv, uid: number): string {
  if (env.GPUCKPT_RUN_DIR) return env.GPUCKPT_RUN_DIR;
  if (env.XDG_RUNTIME_DIR) return join(env.XDG_RUNTIME_DIR, 'gpuckpt');
  return `/tmp/gpuckpt-${uid}`;
}

export function ownRunDir(): string {
  return runDirFor(process.env, process.getuid?.() ?? 0);
}

/** The target's own run directory, if its environment is readable. */
export function processRunDir(pid: number): string | undefined {
  try {
    const raw = readFileSync(`/proc/${pid}/environ`, 'latin1');
    const env: RunDirEnv = {};
    for (const kv of raw.split('\0')) {
      const eq = kv.indexOf('=');
      const k = kv.slice(0, eq);
      if (k === 'GPUCKPT_RUN_DIR' || k === 'XDG_RUNTIME_DIR') env[k] = kv.slice(eq + 1);
    }
    return runDirFor(env, process.getuid?.() ?? 0);
  } catch {
    return undefined;
  }
}

export function socketPath(dir: string, pid: number): string {
  return join(dir, `${pid}.sock`);
}

/** Where suspended processes' data and driver keepers are described: this user's, in memory where the host has /dev/shm. */
export function holdBaseDir(): string {
  const base = existsSync('/dev/shm') ? '/dev/shm' : tmpdir();
  return join(base, `gpuckpt-${process.getuid?.() ?? 0}`);
}
