/**
 * Where a process's control socket lives. The shim (shim/interpose/config.c)
 * computes the same directory from the same variables; when the target's
 * environment differs from ours, it is read from /proc/PID/environ.
 */
import { existsSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { innerPid } from './processes.js';

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

/** Where logs that outlive a command go: <run dir>/logs. */
export function logsDir(): string {
  return join(ownRunDir(), 'logs');
}

/** The run directory of pid's own environment, else ours: where its snapshot holder serves. */
export function runDirOf(pid: number): string {
  return processRunDir(pid) ?? ownRunDir();
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

/**
 * Where pid's control socket may be, most likely first: its run directory
 * and ours, under the PID it has here; and, for a process in a container
 * (other PID and mount namespaces), its run directory seen through
 * /proc/PID/root under the PID it has there (the last of NSpid), which is
 * what the shim names its socket by.
 */
export function socketCandidates(pid: number): string[] {
  const own = processRunDir(pid);
  const dirs = [...new Set([own, ownRunDir()].filter((d): d is string => !!d))];
  const out = dirs.map((d) => socketPath(d, pid));
  const inner = innerPid(pid);
  if (own && inner !== undefined) out.push(socketPath(join(`/proc/${pid}/root`, own), inner));
  return out;
}

/**
 * Processes in other PID namespaces than ours (containers) that name their
 * run directory as we name ours (the default one, typically), with their
 * control socket reachable through /proc/PID/root: what our run directory
 * cannot list.
 */
export function containedShimPids(): number[] {
  let ours: string;
  try {
    ours = readlinkSync('/proc/self/ns/pid');
  } catch {
    return [];
  }
  const mine = ownRunDir();
  const out: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^[0-9]+$/.test(name)) continue;
    const pid = Number(name);
    try {
      if (readlinkSync(`/proc/${pid}/ns/pid`) === ours) continue;
    } catch {
      continue; // gone, or not ours to look at
    }
    const inner = innerPid(pid);
    const dir = inner !== undefined ? processRunDir(pid) : undefined;
    if (dir && dir === mine && existsSync(socketPath(join(`/proc/${pid}/root`, dir), inner!))) out.push(pid);
  }
  return out;
}

/** Where suspended processes' data and driver keepers are described: this user's, in memory where the host has /dev/shm. */
export function holdBaseDir(): string {
  const base = existsSync('/dev/shm') ? '/dev/shm' : tmpdir();
  return join(base, `gpuckpt-${process.getuid?.() ?? 0}`);
}
