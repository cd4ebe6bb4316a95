/**
 * What a whole-process restore needs beside CRIU's own files, checked
 * before anything runs: the record the checkpoint left (which processes,
 * how CRIU was asked to dump them), the files CRIU will reopen, and the
 * fds CRIU is to take from this command (--inherit-fd):
 *
 * - a file open write-only that changed size or went away since the dump
 *   (a log the job wrote on to after a --leave-running checkpoint, or one
 *   rotated away): CRIU refuses it as changed, so this command opens it
 *   for appending (creating it if gone) and the job writes on at its end;
 * - any other file that changed size or went away: refused, naming it;
 * - standard streams that led outside the job: this command's own;
 * - a job attached to a terminal: this command's terminal, so it must
 *   have one.
 */
import { closeSync, constants, openSync, statSync, writeFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { isatty } from 'node:tty';
import type { InheritedFd } from '../adapters/criu.js';
import { criuRegularFiles } from '../adapters/criu-files.js';
import { isWriteOnly } from '../adapters/process-tree.js';
import type { ExternalStdio } from './dump-plan.js';
import { GpuckptError } from '../base/errors.js';
import { formatBytes } from '../base/units.js';

/** CRIU's files in a whole-process image. */
export const CRIU_DIR = 'criu';

/** What restore needs to know about the dump, beside CRIU's own files (in the image's criu/). */
export const PROCESS_INFO = 'gpuckpt-process.json';

export interface ProcessInfo {
  /** The tree's first process: CRIU restores the tree under it. */
  pid: number;
  shellJob: boolean;
  criuVersion: string;
  /** Every process of the tree (each PID must be free to restore); absent in images of one process. */
  tree?: number[];
  /** The processes whose pools the image holds, the image's own first (then members/PID/). */
  members?: number[];
  /** The terminal the job used. Images before it: a shell job was always one with a terminal. */
  terminal?: string;
  externalStdio?: ExternalStdio[];
  /** Options criu restore needs as the dump had them (dump-plan.ts restoreArgs). */
  restoreArgs?: string[];
  /** Whether the job ran NCCL, whose communicators are made again after the restore. Images before it: unknown, asked. */
  nccl?: boolean;
}

export function writeProcessInfo(criuDir: string, info: ProcessInfo): void {
  writeFileSync(join(criuDir, PROCESS_INFO), JSON.stringify(info), { mode: 0o600 });
}

export function readProcessInfo(criuDir: string): ProcessInfo {
  const info = JSON.parse(readFileSync(join(criuDir, PROCESS_INFO), 'utf8')) as ProcessInfo;
  if (info.tree) return info;
  // Written before process trees: one process, a shell job only for a terminal.
  return { ...info, tree: [info.pid], members: [info.pid], terminal: info.shellJob ? 'a terminal' : undefined };
}

export interface RestoreFds {
  inherit: InheritedFd[];
  /** Files given to CRIU to append to, for the summary. */
  appended: string[];
  /** Closes the fds opened here (CRIU has its own copies once it runs). */
  close(): void;
}

/**
 * The fds CRIU takes from this command, after checking the files it will
 * reopen; throws, touching nothing, when the restore cannot work.
 */
export function restoreFds(criuDir: string, info: ProcessInfo): RestoreFds {
  if (info.terminal && !isatty(0))
    throw new GpuckptError('NEEDS_TERMINAL', `process ${info.pid} was attached to ${info.terminal === 'a terminal' ? info.terminal : `a terminal (${info.terminal})`}: restore it from a terminal, which it then uses`);
  const opened: number[] = [];
  const out: RestoreFds = { inherit: [], appended: [], close: () => opened.splice(0).forEach((fd) => closeSync(fd)) };
  try {
    for (const f of criuRegularFiles(criuDir)) {
      const writeOnly = isWriteOnly(f.flags);
      let size: bigint | undefined;
      try {
        size = BigInt(statSync(f.path).size);
      } catch {
        size = undefined;
      }
      const changed = size === undefined || (f.size !== undefined && size !== f.size);
      if (!changed) continue;
      if (!writeOnly)
        throw new GpuckptError(
          'FILE_CHANGED',
          size === undefined
            ? `the job's file ${f.path} is gone since the image was made: put it back to restore`
            : `the job's file ${f.path} is ${formatBytes(Number(size))} now, ${formatBytes(Number(f.size))} when the image was made: CRIU reopens only an unchanged file; put back the file as it was to restore`,
        );
      const fd = openSync(f.path, constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT, 0o644);
      opened.push(fd);
      out.inherit.push({ fd, resource: f.path.slice(1) });
      out.appended.push(f.path);
    }
  } catch (e) {
    out.close();
    throw e;
  }
  for (const s of info.externalStdio ?? []) out.inherit.push({ fd: s.fd, resource: s.resource });
  return out;
}
