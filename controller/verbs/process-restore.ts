/**
 * Whole-process restore: check what CRIU will reopen (restore-plan.ts),
 * unpack CRIU's pages into a scratch directory, `criu restore` from there,
 * then each member's resume path (driver restore, remapped to the target
 * GPU when asked; pool mapped at the same addresses and loaded; gate
 * opened), decompressed while CRIU ran. The image is read, never consumed.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { criuRestoreTree, findCriu } from '../adapters/criu.js';
import { killProcess, waitAsForeground, waitPidsFree } from '../adapters/processes.js';
import { EXIT_FAILURE, GpuckptError, isGpuckptError, valuesOrFirstFailure } from '../base/errors.js';
import { PhaseClock, type Phases } from '../base/phase-clock.js';
import { round } from '../base/units.js';
import { rebuildJob } from '../engine/collective-cut.js';
import { checkGpuRoom, readGpuNeeds, refuseOtherChip } from '../engine/gpu-room.js';
import { unpackCriuDir, type CriuScratch, type PagesSummary } from '../engine/criu-pages.js';
import { memberImageDir, memberShares } from '../engine/members.js';
import { PoolLoader } from '../engine/pool-loader.js';
import { codecPool, type CodecPool } from '../engine/codec-pool.js';
import { CRIU_DIR, PROCESS_INFO, readProcessInfo, restoreFds, type RestoreFds } from '../engine/restore-plan.js';
import { gpuPairs, resolveGpu, resumeProcess, type ResumeSummary } from '../engine/suspend.js';
import { ThawOrder } from '../engine/thaw-order.js';
import { openChain } from '../image/chain.js';
import { ImageReader } from '../image/index.js';
import { native } from '../../native/index.js';
import { Latch } from '../base/latch.js';
import { log } from '../base/log.js';
import { faultPoint } from '../base/faults.js';

export interface ProcessRestoreSummary {
  image: string;
  pid: number;
  /** The processes whose pools were loaded, the image's own first. */
  members: number[];
  criuSeconds: number;
  /** CRIU's pages unpacked for it, before it started (absent: stored raw). */
  criuPages?: PagesSummary;
  /** Decompressing the pool images into staging, while CRIU ran. */
  loadSeconds: number;
  /** The first member's resume; the others' in others. */
  resume: ResumeSummary;
  others?: ResumeSummary[];
  /** Files the job had open write-only that changed since the image: it writes on at their end (restore-plan.ts). */
  appended?: string[];
  /** Until the application runs again with all its data. */
  seconds: number;
  /** When the driver had started and the GPU checks had passed, beside the unpacking and CRIU. */
  gpuChecksSeconds: number;
  /** Freeing the staging memory and CRIU's unpacked pages afterwards (the application is already running). */
  cleanupSeconds: number;
  /** Where the time went: checks (the PIDs free), unpack (CRIU's pages, beyond the checks), criu (the GPU checks beside it), load (the pools' loading beyond CRIU's time), resume, nccl (communicators made again). */
  phases: Phases;
  /** Without --detach: the application's exit status once it ends (all null: not known, see waitChildEnd). */
  exitCode?: number | null;
  signal?: string | null;
  signalNumber?: number | null;
}

export async function restoreProcess(
  image: string,
  opts: { device?: string; detach?: boolean; criu?: string; stagingLimit?: bigint; workers?: number; progress?: boolean; running?: () => void } = {},
): Promise<ProcessRestoreSummary> {
  const t0 = performance.now();
  // The pool images and the chain of parents check out before anything runs.
  const reader = await ImageReader.open(image);
  const readers = [reader];
  const loaders: PoolLoader[] = [];
  // Closed here until the loader takes them.
  let parents: ImageReader[] | undefined;
  let fds: RestoreFds | undefined;
  let scratch: Promise<CriuScratch> | undefined;
  let codecs: CodecPool | undefined;
  let opening: Promise<void> | undefined;
  const refused = new AbortController(); // a check failing stops the unpacking
  try {
    const chain = await openChain(reader);
    parents = chain.parents;
    const dir = join(reader.path, CRIU_DIR);
    if (reader.manifest.kind !== 'process' || !existsSync(join(dir, PROCESS_INFO)))
      throw new GpuckptError('IMAGE_NOT_AN_IMAGE', `${reader.path} holds the GPU memory only (a --gpu-only image): restore it into a running process with --into PID`);
    const info = readProcessInfo(dir);
    // CRIU's pages are unpacked while the checks run (they touch nothing but
    // a scratch directory); the pool images wait for every core until then.
    // The same workers go on to the largest pool image: started again there,
    // 32 of them took 0.3 s before CRIU could start.
    codecs = codecPool(opts.workers);
    scratch = unpackCriuDir(dir, { codecs, signal: refused.signal });
    scratch.catch(() => undefined); // awaited below, or cleaned up in finally
    const criu = findCriu(opts.criu); // its --version, 10-20 ms, while the workers start
    const members = info.members!;
    for (const m of members.slice(1)) readers.push(await ImageReader.open(join(reader.path, memberImageDir(m))));
    const clock = new PhaseClock('restore', t0);
    // The GPU checks wait for the driver's start (cuInit, 0.3-0.5 s with no
    // other process on the GPU, cli/driver-warmup.ts): they run beside the
    // unpacking and CRIU, which holds the processes it brought back, none of
    // them run yet, until they pass (criu.ts, criuRestoreTree).
    const gpusChecked = checkGpus(readers, members, opts.device, t0);
    gpusChecked.catch(() => refused.abort());
    // A failure before anything runs gives a refusal of the GPU checks as
    // its reason: the restore could not have gone on past them either.
    const refusalFirst = async (e: unknown): Promise<never> => {
      await gpusChecked;
      throw e;
    };
    // Mostly the wait for the PIDs the tree needs: the checkpointed processes' exit, and their reaping.
    await waitPidsFree(info.tree!).catch(refusalFirst);
    fds = restoreFds(dir, info);
    clock.mark('checks');

    // The pool images are decompressed while CRIU brings the processes back.
    const unpacked = await scratch.catch(refusalFirst);
    clock.mark('unpack');
    if (refused.signal.aborted) await gpusChecked; // refused already: CRIU is not started
    parents = undefined; // the first loader's now
    // The loaders open once CRIU has started (their staging took 0.03-0.04 s
    // before it), and CRIU lets the processes run only once they are open.
    // The workers that unpacked CRIU's pages go on to the largest pool.
    opening = Promise.resolve().then(async () => {
      const sizes = readers.map((r) => Number(r.manifest.data.rawBytes));
      const shares = memberShares(opts, sizes);
      const largest = sizes.indexOf(Math.max(...sizes));
      for (const [i, r] of readers.entries()) loaders.push(await PoolLoader.open(r, { ...opts, ...shares[i], ...(i === largest ? { codecs } : {}) }, i === 0 ? chain : undefined));
    });
    opening.catch(() => undefined); // CRIU's gate says why
    const restored = await criuRestoreTree(criu, unpacked.dir, reader.path, { detach: !!opts.detach, shellJob: info.shellJob, terminal: !!info.terminal, inherit: fds.inherit, args: info.restoreArgs ?? [], until: Promise.all([gpusChecked, opening]) }).catch(refusalFirst);
    const gpuChecksSeconds = await gpusChecked;
    fds.close();
    const criuSeconds = (performance.now() - t0) / 1000;
    clock.mark('criu');
    // CRIU has read the scratch: its pages are freed beside the resumes
    // (0.18-0.22 s for the 2-rank DDP job's 2.6 GB, on libuv's pool; in its
    // traces, done 0.7 s before the NCCL rebuild began).
    const r0 = performance.now();
    const scratchRemoved = unpacked.cleanup().then(() => log('debug', 'restore', `CRIU's scratch removed in ${((performance.now() - r0) / 1000).toFixed(3)} s`));
    scratchRemoved.catch(() => undefined); // awaited below, or again in finally
    try {
      await Promise.all(loaders.map((l) => l.whenReady()));
    } catch (e) {
      // Without their GPU data the processes cannot run, and they hold the
      // PIDs another restore needs: they are ended (the image is as it was).
      killProcess(info.pid);
      throw new GpuckptError(isGpuckptError(e) ? e.code : 'INTERNAL', `${(e as Error).message}; the restored process ${info.pid} was ended`, { exitStatus: EXIT_FAILURE });
    }
    clock.mark('load');
    const { resumes, ncclFailure } = await resumeAndRebuild(members, loaders, opts, info.nccl !== false, clock);
    const [resume, ...others] = resumes as [ResumeSummary, ...ResumeSummary[]];
    clock.mark('nccl');
    if (ncclFailure) throw new GpuckptError('NCCL_FAILED', `the restored job of process ${info.pid}: ${ncclFailure}`);
    const seconds = (performance.now() - t0) / 1000;
    const c0 = performance.now();
    const loadSeconds = Math.max(...loaders.map((l) => l.loadSeconds));
    // The processes run: the loaders' staging goes, all at once (their
    // workers ended as soon as each had loaded).
    await Promise.all([scratchRemoved, closeLoaders(loaders, codecs)]);
    const summary: ProcessRestoreSummary = {
      image: reader.path,
      pid: info.pid,
      members,
      criuSeconds: round(criuSeconds),
      ...(unpacked.pages ? { criuPages: unpacked.pages } : {}),
      loadSeconds: round(loadSeconds),
      resume,
      ...(others.length ? { others } : {}),
      ...(fds.appended.length ? { appended: fds.appended } : {}),
      seconds: round(seconds),
      gpuChecksSeconds: round(gpuChecksSeconds),
      cleanupSeconds: round((performance.now() - c0) / 1000),
      phases: clock.phases,
    };
    opts.running?.(); // the image is needed no more
    if (!opts.detach) {
      const end = await waitAsForeground(restored.done, info.pid);
      summary.exitCode = end.code;
      summary.signal = end.signal;
      summary.signalNumber = end.signalNumber;
    }
    return summary;
  } catch (e) {
    refused.abort();
    throw e;
  } finally {
    fds?.close();
    await scratch?.then((s) => s.cleanup(), () => undefined);
    await Promise.all((parents ?? []).map((p) => p.close()));
    await opening?.catch(() => undefined); // the loaders it opens are closed here too
    await closeLoaders(loaders, codecs);
    await Promise.all(readers.map((r) => r.close()));
  }
}

/**
 * Every member resumed, then its NCCL communicators made again (asked only
 * of a job that ran NCCL: one without it may end before a hello). Each
 * resume's connection stays open until then: the shim lets go of the
 * staging it was given (unpin, unmap) when it closes, and the rebuild
 * beside that took 0.40-0.47 s against 0.04-0.06 s after it (2x H200).
 */
async function resumeAndRebuild(
  members: number[],
  loaders: PoolLoader[],
  opts: { device?: string; progress?: boolean },
  nccl: boolean,
  clock: PhaseClock,
): Promise<{ resumes: ResumeSummary[]; ncclFailure?: string }> {
  const rebuilt = new Latch();
  const thawOrder = new ThawOrder(members.length);
  try {
    const resumes = valuesOrFirstFailure(
      await Promise.allSettled(
        members.map((m, i) => resumeProcess(m, { loader: loaders[i], keepImage: true, device: opts.device, progress: opts.progress && i === 0, holdUntil: rebuilt.opened, thawOrder })),
      ),
      (i, message) => (members.length > 1 ? `process ${members[i]} of the restored job: ${message}` : message),
    );
    clock.mark('resume');
    return { resumes, ncclFailure: nccl ? await rebuildJob(members) : undefined };
  } finally {
    rebuilt.open();
  }
}

/** Every loader taken out of loaders and closed at once, and the workers the largest took over or was to take (a pool closes once). */
async function closeLoaders(loaders: PoolLoader[], codecs: CodecPool | undefined): Promise<void> {
  await Promise.all([...loaders.splice(0).map((l) => l.close()), codecs?.close()]);
}

/**
 * The driver's start, then the GPUs the image's processes land on: the
 * chip type, --device, their room. Seconds from t0 when they passed.
 */
async function checkGpus(readers: ImageReader[], members: number[], device: string | undefined, t0: number): Promise<number> {
  await native().warmDriver();
  const target = device === undefined ? undefined : resolveGpu(device);
  for (const r of readers) refuseOtherChip(r.manifest.devices.map((d) => d.name), target?.name);
  readers.forEach((r, i) => {
    const taken = r.manifest.devices.map((d) => d.uuid);
    checkGpuRoom(members[i]!, readGpuNeeds(r.path), taken, target ? gpuPairs(taken, target.uuid) : undefined, 'nothing was restored; choose another GPU with --device');
  });
  faultPoint('gpu-checks');
  const seconds = (performance.now() - t0) / 1000;
  log('debug', 'restore', `GPU checks passed at ${seconds.toFixed(3)} s`);
  return seconds;
}
