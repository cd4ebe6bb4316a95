/**
 * What the CRIU plugin (native/criu-plugin/) has gpuckpt do, one step per
 * `gpuckpt __criu-plugin STEP PID IMAGES`, so that plain `criu dump` and
 * `criu restore` carry a process's GPU pool:
 *
 * - dump (PAUSE_DEVICES, the process still running): refused for a rank of
 *   an NCCL job; else suspended into a pool image at IMAGES/gpuckpt-pool-N
 *   (N: its PID in its own PID namespace, as CRIU's image has it),
 *   its GPU free and no copy of the pool left in the process for CRIU to dump.
 * - resume (started once the dump step succeeded): "ready" at once, then,
 *   if CRIU leaves the process (a failed dump, --leave-running, CRIU gone
 *   past its alarm), resumed from that image once CRIU has exited; nothing
 *   when CRIU ended it.
 * - restore (RESUME_DEVICES_LATE, the restored process still stopped): the
 *   image opened and loading, "ready", then, once CRIU releases the process,
 *   resumed from it (GPUCKPT_RESTORE_DEVICE picks another GPU); a process
 *   that cannot get its data is ended, as gpuckpt restore does (the
 *   plugin ends it when loading fails before "ready").
 *
 * A process not under gpuckpt, or without a pool image, is not ours: exit
 * NOT_OURS, or "not ours" instead of "ready"; but a restored process whose
 * pool is suspended and has no image cannot run: its restore fails. A helper says why it failed
 * before "ready" on stdout (its stderr goes nowhere); after, the plugin has
 * stopped reading: the outcome goes to <run dir>/logs/criu-plugin-PID.log.
 */
import { appendFileSync, existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { GpuckptError, isGpuckptError } from '../base/errors.js';
import { innerPid, killProcess, processStatus } from '../adapters/processes.js';
import { isAlive } from '../base/pid-alive.js';
import { logsDir } from '../adapters/run-dir.js';
import { ShimSession } from '../adapters/session.js';
import { openChain } from '../image/chain.js';
import { MANIFEST_FILE } from '../image/format.js';
import { ImageReader } from '../image/index.js';
import { PoolLoader } from '../engine/pool-loader.js';
import { resumeProcess, suspendProcess } from '../engine/suspend.js';
import { PoolState } from '../../native/index.js';

/** Exit status of `dump` for a process not under gpuckpt. */
export const NOT_OURS_EXIT = 10;
export const PLUGIN_STEPS = ['dump', 'resume', 'restore'] as const;
export type PluginStep = (typeof PLUGIN_STEPS)[number];

/**
 * Where the plugin keeps a process's pool image among CRIU's files: named
 * by the PID CRIU's image gives the process, the one it has in its own
 * PID namespace, which a restore keeps. Its PID here changes when a
 * container is restored: named so, podman's restore found no image and
 * left the process waiting for its pool for ever.
 */
export function poolImageIn(images: string, pid: number): string {
  return join(images, `gpuckpt-pool-${innerPid(pid) ?? pid}`);
}

/** The image a restore step takes: as poolImageIn names it, else by the PID here (an older plugin's image). */
function restoredImage(images: string, pid: number): string | undefined {
  return [poolImageIn(images, pid), join(images, `gpuckpt-pool-${pid}`)].find((image) => existsSync(join(image, MANIFEST_FILE)));
}

/** Runs a step; its exit status. */
export async function criuPluginStep(step: PluginStep, pid: number, images: string): Promise<number> {
  if (step === 'dump') return dump(pid, images);
  const image = restoredImage(images, pid);
  if (!image) {
    // A restored process under gpuckpt waits, suspended, for its pool: without an image it would wait for ever.
    if (step === 'restore' && (await suspendedUnderGpuckpt(pid))) {
      console.log(`cannot load the pool of process ${pid}: ${poolImageIn(images, pid)} is missing (CRIU's images hold no pool image for it)`);
      return 1;
    }
    console.log(`not ours: ${poolImageIn(images, pid)} holds no pool image`);
    return 0;
  }
  const log = logOf(pid);
  let loader: PoolLoader | undefined;
  try {
    if (step === 'restore') loader = await openLoader(image);
  } catch (e) {
    // A helper's stderr goes nowhere: the plugin reads why on stdout.
    console.log(`cannot load ${image}: ${(e as Error).message}`);
    return 1;
  }
  console.log('ready');
  // CRIU exits after a dump; it releases a restored process and exits too.
  const criu = Number(process.env.GPUCKPT_CRIU_PID) || undefined;
  try {
    const now = await runsFreely(pid, step === 'resume' ? criu : undefined);
    if (now !== 'runs') {
      if (now === 'stopped') log(`process ${pid} was still stopped after ${WAIT_MS / 1000} s: gpuckpt resume ${pid} once it runs`);
      return 0;
    }
    const r = await resumeProcess(pid, { ...(loader ? { loader } : { image }), keepImage: true, device: process.env.GPUCKPT_RESTORE_DEVICE });
    log(`process ${pid} resumed from ${image} in ${r.seconds} s`);
    return 0;
  } catch (e) {
    // Another helper got there first (a failed dump's, restored at once): done.
    if (isGpuckptError(e, 'NOT_SUSPENDED') || (await becomesActive(pid))) return 0;
    // A restored process cannot run without its GPU data.
    if (step === 'restore') killProcess(pid);
    log(`${step} of process ${pid} failed: ${(e as Error).message}${step === 'restore' ? '; the restored process was ended' : `; gpuckpt resume ${pid} tries again`}`);
    return 1;
  } finally {
    await loader?.close();
    await loader?.reader.close();
  }
}

async function dump(pid: number, images: string): Promise<number> {
  let session: ShimSession;
  try {
    session = await ShimSession.open(pid);
  } catch (e) {
    if (isGpuckptError(e, 'NOT_UNDER_GPUCKPT') || isGpuckptError(e, 'PID_NOT_RUNNING')) return NOT_OURS_EXIT;
    throw e;
  }
  try {
    const comms = (await session.ncclStatus()).comms.length;
    if (comms) throw new GpuckptError('JOB_REFUSED', `process ${pid} is a rank of an NCCL job (${comms} communicator(s)): CRIU alone cannot stop its ranks at one collective; gpuckpt checkpoint JOB does`);
  } finally {
    session.close();
  }
  await suspendProcess(pid, { to: poolImageIn(images, pid), force: true });
  return 0;
}

async function openLoader(image: string): Promise<PoolLoader> {
  const reader = await ImageReader.open(image);
  try {
    return await PoolLoader.open(reader, {}, await openChain(reader));
  } catch (e) {
    await reader.close();
    throw e;
  }
}

const WAIT_MS = 600_000;

/**
 * Waits until pid runs on its own: neither traced nor stopped, and (after
 * a dump) criu, when given, gone. 'gone' when pid ended; 'stopped' when it
 * was still held after WAIT_MS (left as it is).
 */
async function runsFreely(pid: number, criu?: number): Promise<'runs' | 'gone' | 'stopped'> {
  for (const until = Date.now() + WAIT_MS; Date.now() < until; await new Promise((r) => setTimeout(r, 20))) {
    const status = processStatus(pid);
    const state = status?.State?.[0];
    if (!status || state === 'Z' || state === 'X') return 'gone';
    const held = status.TracerPid?.[0] !== '0' || state === 'T' || state === 't';
    if (!held && !(criu && isAlive(criu))) return 'runs';
  }
  return isAlive(pid) ? 'stopped' : 'gone';
}

/** pid's pool state (PoolState); undefined when its shim does not answer (not under gpuckpt, or gone). */
async function poolStateOf(pid: number): Promise<number | undefined> {
  try {
    const session = await ShimSession.open(pid);
    try {
      return (await session.status()).poolState;
    } finally {
      session.close();
    }
  } catch {
    return undefined;
  }
}

/** Whether pid runs under gpuckpt with its pool suspended. */
async function suspendedUnderGpuckpt(pid: number): Promise<boolean> {
  return (await poolStateOf(pid)) === PoolState.SUSPENDED;
}

/** Whether pid's pool is back within a few seconds (another helper resuming it). */
async function becomesActive(pid: number): Promise<boolean> {
  for (let i = 0; i < 50; i++) {
    const state = await poolStateOf(pid);
    if (state === undefined) return false;
    if (state === PoolState.ACTIVE) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

/** Appends a line to <run dir>/logs/criu-plugin-PID.log. */
function logOf(pid: number): (line: string) => void {
  const dir = logsDir();
  return (line) => {
    try {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      appendFileSync(join(dir, `criu-plugin-${pid}.log`), `${new Date().toISOString()} ${line}\n`);
    } catch {
      // nowhere to say it
    }
  };
}
