/**
 * Images that travel as one stream: `checkpoint -o -` and `--export FILE`,
 * `restore -` and `--import FILE`. A checkpoint still writes its image to a
 * directory (in /dev/shm when the image surely fits there: the disk then
 * sees the exported file only; else under TMPDIR for a pipe, beside the
 * file otherwise), and the
 * stream follows its pool images' frames as they reach the disk, so that
 * `gpuckpt checkpoint PID -o - | ssh host gpuckpt restore -` costs little
 * more than the two alone; the directory goes once streamed. A received
 * stream is checked whole (image/stream.ts) before anything is restored
 * from it, and its directory goes once the job runs.
 */
import { closeSync, cpSync, existsSync, fsyncSync, mkdirSync, openSync, renameSync, rmSync, statfsSync, statSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { freemem, tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { isatty } from 'node:tty';
import { GpuckptError } from '../base/errors.js';
import { log } from '../base/log.js';
import { round } from '../base/units.js';
import type { CheckpointOptions } from '../engine/pool-image.js';
import { DATA_FILE } from '../image/format.js';
import { receiveImage, sendImage, type FollowedFile, type StreamSummary } from '../image/stream.js';
import { fsyncDir } from '../image/durable.js';
import { removeStaleTempDirs, tempDirName } from '../image/temp-dirs.js';
import { isCudaMember } from '../adapters/jobs.js';
import { readTree } from '../adapters/process-tree.js';
import { residentBytes } from '../adapters/processes.js';
import { ShimSession } from '../adapters/session.js';
import { native } from '../../native/index.js';

/** '-': standard output or input. */
export const STDIO = '-';

export interface StreamedSummary {
  stream: StreamSummary & { seconds: number; to?: string; from?: string };
}

/**
 * Where a streamed image's directory is written: in memory when at most
 * bytes fit there (passingParent), else beside the file it goes to, or
 * TMPDIR for a pipe.
 */
async function passingDir(file: string, bytes: number): Promise<string> {
  return passingDirIn(passingParent(bytes, file === STDIO ? tmpdir() : dirname(resolve(file))), file === STDIO ? 'gpuckpt-stream' : basename(file));
}

async function passingDirIn(parent: string, name: string): Promise<string> {
  await removeStaleTempDirs(parent);
  return join(parent, tempDirName(name));
}

/**
 * Where an image passes through on its way into or out of a stream:
 * TMPDIR when the user set it, else /dev/shm when it has room for bytes
 * and 1 GiB more and the host's available memory twice that (the other
 * side reads it back at once: it need never reach a disk), else otherwise.
 */
export function passingParent(bytes: number, otherwise = tmpdir(), env: NodeJS.ProcessEnv = process.env): string {
  if (env.TMPDIR) return tmpdir();
  try {
    // Room in /dev/shm, and memory for it beside the staging a checkpoint
    // or restore takes (about as much again).
    const fs = statfsSync(SHM);
    if (fs.bavail * fs.bsize >= bytes + (1 << 30) && freemem() >= 2 * bytes + (1 << 30)) return SHM;
  } catch {
    // no /dev/shm here
  }
  return otherwise;
}

const SHM = '/dev/shm';

/**
 * At most how many bytes an image of the job of pid holds: its CUDA
 * processes' pools in use and, for a whole-process image, the resident
 * memory of its process tree (CRIU's pages), before any compression.
 */
export async function imageBytesBound(pid: number, gpuOnly: boolean): Promise<number> {
  let bytes = 0;
  for (const { pid: p } of readTree(pid)) {
    if (isCudaMember(p)) bytes += await poolInUse(p);
    if (!gpuOnly) bytes += residentBytes(p);
  }
  return bytes;
}

/** Bytes of pid's pool allocations (0 when its shim does not answer: the checkpoint will say why). */
async function poolInUse(pid: number): Promise<number> {
  try {
    const session = await ShimSession.open(pid);
    try {
      return Number((await session.status()).devices.reduce((n, d) => n + d.bytesInUse, 0n));
    } finally {
      session.close();
    }
  } catch {
    return 0;
  }
}

/**
 * Runs make(dir, opts) (a checkpoint into dir, with onWriter set) and
 * streams the image it writes to `to` ('-' or a file, which is complete
 * or absent); the summary make returned, with the stream's.
 */
export async function checkpointStreamed<S extends object>(
  to: string,
  force: boolean,
  make: (dir: string, opts: Pick<CheckpointOptions, 'onWriter'>) => Promise<S>,
  /** At most the image's bytes (imageBytesBound): where it may pass. */
  bytes: number,
): Promise<S & StreamedSummary> {
  const t0 = performance.now();
  const file = to === STDIO ? undefined : resolve(to);
  if (!file && process.stdout.isTTY) throw new GpuckptError('BAD_ARGUMENT', '-o - streams the image to standard output, which is a terminal: pipe it (| ssh HOST gpuckpt restore -) or use --export FILE');
  if (file && existsSync(file) && !force) throw new GpuckptError('IMAGE_EXISTS', `${file} exists: not replacing it (--force replaces it)`);
  const dir = await passingDir(to, bytes);
  const follow: FollowedFile[] = [];
  const onWriter = (writer: Parameters<NonNullable<CheckpointOptions['onWriter']>>[0], within: string) =>
    follow.push({ path: within ? `${within}/${DATA_FILE}` : DATA_FILE, writer, fd: openSync(join(writer.tempPath, DATA_FILE), 'r') });
  const partial = file && join(dirname(file), tempDirName(basename(file)));
  // Opened before the checkpoint starts: a file that cannot be made must not pause the job.
  let fd = partial ? openSync(partial, 'wx', 0o600) : undefined;
  const done = make(dir, { onWriter });
  let kept: string | undefined;
  try {
    const stream = await sendImage(fd === undefined ? { fd: 1, file: false } : { fd, file: true }, () => dir, done, () => follow, bytes);
    const summary = await done;
    log('debug', 'stream', `${stream.bytes} bytes sent in ${((performance.now() - t0) / 1000).toFixed(3)} s`);
    if (fd !== undefined) {
      fsyncSync(fd);
      closeSync(fd);
      fd = undefined;
      renameSync(partial!, file!);
      await fsyncDir(dirname(file!));
    }
    return { ...summary, stream: { ...stream, seconds: round((performance.now() - t0) / 1000), ...(file ? { to: file } : {}) } };
  } catch (e) {
    const made = await done.then(
      () => true,
      () => false,
    );
    if (fd !== undefined) closeSync(fd);
    if (partial) rmSync(partial, { force: true });
    if (!made) throw e;
    // The checkpoint completed and the stream did not (its reader gone, its
    // disk full): the image is all the job has now, so it stays, under a
    // name no cleanup of working directories takes.
    // On a disk: where it passed, unless that was memory.
    const onDisk = dirname(dir) === SHM ? (file ? dirname(file) : tmpdir()) : dirname(dir);
    kept = join(onDisk, `gpuckpt-image-${process.pid}-${Date.now()}`);
    try {
      renameSync(dir, kept);
    } catch (m) {
      if ((m as NodeJS.ErrnoException).code !== 'EXDEV') throw m;
      cpSync(dir, kept, { recursive: true });
      rmSync(dir, { recursive: true, force: true });
    }
    throw new GpuckptError('IMAGE_WRITE_FAILED', `${(e as Error).message}; the checkpoint itself completed and its image is kept at ${kept}: gpuckpt restore ${kept}, or copy it where it is needed`, { cause: e });
  } finally {
    for (const f of follow) closeSync(f.fd);
    if (!kept) rmSync(dir, { recursive: true, force: true });
  }
}

const openedFile = (file: string) => {
  const fd = openSync(file, 'r');
  return { fd, done: () => closeSync(fd) };
};

/**
 * Standard input made blocking where it can be (a pipe, a socket, a file):
 * its reads then wait in the thread pool, not in timers. The descriptor
 * may be shared (a socket from sshd): done() puts its flag back.
 */
function blockingStdin(): { fd: number; done: () => void } {
  let wasBlocking: boolean;
  try {
    wasBlocking = native().setBlocking(0, true);
  } catch {
    return { fd: 0, done: () => undefined };
  }
  native().growPipe(0);
  return { fd: 0, done: () => void (wasBlocking || native().setBlocking(0, false)) };
}

/**
 * Receives an image from `from` ('-' or a file) into a directory of its
 * own, checked whole, then runs restore(dir, running): running() starts
 * removing the directory once the restore needs it no more (done before
 * this returns).
 */
export async function restoreStreamed<S extends object>(from: string, restore: (dir: string, running: () => void) => Promise<S>): Promise<S & StreamedSummary> {
  const t0 = performance.now();
  const file = from === STDIO ? undefined : resolve(from);
  if (!file && isatty(0)) throw new GpuckptError('BAD_ARGUMENT', 'restore - reads an image stream from standard input, which is a terminal: pipe one in (gpuckpt checkpoint PID -o - | gpuckpt restore -) or use --import FILE');
  if (file && !existsSync(file)) throw new GpuckptError('IMAGE_MISSING', `${file} does not exist`);
  let dir: string | undefined;
  // In the background: 16 GiB of pages to free took 0.4-0.8 s, beside the job's resume and the restore's own end.
  let removal: Promise<void> | undefined;
  const gone = () => (removal ??= dir ? rm(dir, { recursive: true, force: true }) : Promise.resolve());
  // A file's size is known; a pipe's sender says at most how much comes (0: not known, TMPDIR).
  const dirFor = async (bound: number | undefined) => {
    const size = file ? statSync(file).size : bound;
    dir = await passingDirIn(size === undefined ? tmpdir() : passingParent(size), file ? 'gpuckpt-import' : 'gpuckpt-stream');
    mkdirSync(dir, { mode: 0o700 });
    return dir;
  };
  try {
    // Standard input is never touched through process.stdin, which would make it non-blocking.
    const input = file ? openedFile(file) : blockingStdin();
    const stream = await receiveImage(input.fd, dirFor).finally(input.done);
    const received = round((performance.now() - t0) / 1000);
    log('debug', 'stream', `${stream.bytes} bytes received and checked in ${received} s`);
    const summary = await restore(dir!, () => void gone());
    return { ...summary, stream: { ...stream, seconds: received, ...(file ? { from: file } : {}) } };
  } finally {
    const t = performance.now();
    await gone();
    log('debug', 'stream', `passing directory removed (waited ${((performance.now() - t) / 1000).toFixed(3)} s)`);
  }
}
