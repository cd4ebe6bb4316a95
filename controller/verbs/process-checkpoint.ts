/**
 * Whole-process checkpoint: gpuckpt carries the pools, the driver's
 * checkpoint API the rest of the CUDA state, CRIU the processes. Check the
 * job's process tree (dump-plan.ts: refused there, untouched, when CRIU
 * could not carry it), suspend every process of it that runs CUDA under
 * gpuckpt into a hidden working directory (pool released, driver state to
 * host memory, its pool image written from the staging the snapshot holder
 * keeps meanwhile), `criu dump` the tree into its criu/, and while CRIU
 * waits at its gate (criu-gate.ts) wait for the pool images, compress
 * CRIU's pages (criu-pages.ts) and rename it to the image's name: the image
 * is complete or absent, and the job ends only once it is complete. The
 * first such process's pool image is the image's own; the others are
 * linked into members/PID/. With --leave-running the processes are resumed
 * from their pool images afterwards; a failing dump resumes them too.
 */
import { existsSync, mkdirSync, renameSync, rmSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { criuDump, criuDumpGated, findCriu } from '../adapters/criu.js';
import { residentBytes } from '../adapters/processes.js';
import { GpuckptError, isGpuckptError } from '../base/errors.js';
import { faultPoint } from '../base/faults.js';
import { Interrupts } from '../base/interrupts.js';
import { PhaseClock, type Phases } from '../base/phase-clock.js';
import { round } from '../base/units.js';
import { JobCut, rebuildJob } from '../engine/collective-cut.js';
import { planDump } from '../engine/dump-plan.js';
import { readJob } from '../engine/job-plan.js';
import { checkpointLeavingRunning } from '../engine/gpu-snapshot.js';
import { describeFrameworkUse } from '../engine/framework-free.js';
import { PAGES, type PagesSummary } from '../engine/criu-pages.js';
import { makeDumpScratch, moveFiles, type Scratch } from '../engine/criu-scratch.js';
import { CriuPagesPacker, followingWorkers } from '../engine/criu-pages-pack.js';
import { defaultWorkerCount } from '../engine/codec-pool.js';
import { heldOrImages, MEMBERS_DIR, memberImageDir, resumeAfterFailure, resumeMembers, suspendMembers } from '../engine/members.js';
import type { CheckpointOptions } from '../engine/pool-image.js';
import { CRIU_DIR, writeProcessInfo, type ProcessInfo } from '../engine/restore-plan.js';
import { defaultHoldDir, type SuspendSummary } from '../engine/suspend.js';
import { fsyncDir, linkTree, publishImage, refuseTakenTarget, syncTree } from '../image/durable.js';
import { removeStaleTempDirs } from '../image/index.js';
import { osErrorText } from '../image/os-error.js';
import { tempDirName } from '../image/temp-dirs.js';

export interface ProcessCheckpointSummary {
  image: string;
  pid: number;
  /** The processes of the job that run CUDA under gpuckpt, whose pools the image holds. */
  members: number[];
  /** What the checks arranged for CRIU (dump-plan.ts). */
  notes: string[];
  rawBytes: number;
  storedBytes: number;
  leftRunning: boolean;
  criuVersion: string;
  gpuFreeSeconds: number;
  dumpSeconds: number;
  /** fsync of CRIU's files, after the dump (and after a --leave-running process runs again). */
  syncSeconds: number;
  /** CRIU's pages as compressed after the dump (absent: kept as CRIU wrote them; notes say why). */
  criuPages?: PagesSummary;
  seconds: number;
  /** --leave-running: from the application's pause until it ran again. */
  pauseSeconds?: number;
  /** --leave-running: the pool copied on its GPU for the pause ('gpu', gpu-snapshot.ts) or through host memory, and why. */
  route?: 'gpu' | 'host';
  whyThroughHost?: string;
  /** Steps of a 'gpu' route's pause, in order; of the host route, the whole command's. */
  phases?: Phases;
  /** The host route: each member's suspend (its pool image written), by step. */
  suspendPhases?: Phases[];
}

export async function checkpointProcess(
  pid: number,
  out: string,
  opts: CheckpointOptions & { leaveRunning?: boolean; criu?: string; criuOpts?: string[]; rawCriuPages?: boolean } = {},
): Promise<ProcessCheckpointSummary> {
  const t0 = performance.now();
  const target = resolve(out);
  refuseTakenTarget(target, !!opts.force);
  // Refused in the order of their causes, before the process is touched: a
  // process not under gpuckpt, or part of a distributed job; then no CRIU.
  const { comms, poolBytes } = await readJob(pid, 'checkpoint');
  const criu = findCriu(opts.criu);
  const plan = planDump(pid, criu, opts.criuOpts);
  const [primary, ...others] = plan.members as [number, ...number[]];
  if (others.length && opts.parent)
    throw new GpuckptError('BAD_ARGUMENT', `the job of process ${pid} has ${plan.members.length} CUDA processes (${plan.members.join(', ')}): --parent is for a job with one`);
  await removeStaleTempDirs(dirname(target));
  const dump = { root: pid, args: [...plan.criuArgs, ...(opts.criuOpts ?? [])] };
  const info: ProcessInfo = {
    pid,
    shellJob: plan.shellJob,
    criuVersion: criu.version,
    tree: plan.tree.map((p) => p.pid),
    members: plan.members,
    terminal: plan.terminal,
    externalStdio: plan.externalStdio,
    ...(plan.restoreArgs.length ? { restoreArgs: plan.restoreArgs } : {}),
    nccl: comms.length > 0,
  };
  const notes: string[] = [];
  // CRIU's pages, packed as CRIU writes them (made once the processes are
  // suspended), from a scratch of huge pages where there is one.
  let packer: CriuPagesPacker | undefined;
  let scratch: Scratch | undefined;
  const packerFor = (dir: string, following = false) =>
    opts.rawCriuPages ? undefined : new CriuPagesPacker(dir, { level: opts.level, workers: opts.workers ?? (following ? followingWorkers() : undefined), rawDir: scratch?.dir });
  const pack = async (dir: string): Promise<{ criuPages?: PagesSummary }> => {
    if (!packer) return {};
    try {
      const criuPages = await packer.finish();
      for (const left of packer.rawLeft) notes.push(`CRIU's raw page file ${left} could not be removed: the image keeps it beside its packed form`);
      return { criuPages };
    } catch (e) {
      notes.push(`CRIU's pages kept as CRIU wrote them: ${(e as Error).message}`);
      return {};
    } finally {
      packer = undefined;
      // What the packer left of CRIU's raw pages (it failed, or could not
      // remove a file) stays in the image; the scratch goes here, once.
      const left = scratch;
      scratch = undefined;
      if (left) moveFiles(left.dir, dir);
      await left?.remove();
    }
  };
  const summaryOf = (s: Omit<ProcessCheckpointSummary, 'image' | 'pid' | 'criuVersion' | 'seconds' | 'members' | 'notes'>): ProcessCheckpointSummary => ({
    image: target,
    pid,
    members: plan.members,
    criuVersion: criu.version,
    notes: [...plan.notes, ...notes],
    ...s,
    seconds: round((performance.now() - t0) / 1000),
  });
  // Owned by the application, not by this controller: while CRIU dumps it,
  // the application is suspended with its pool held in this directory (or
  // by the snapshot holder) only, and a controller killed meanwhile must
  // not make it stale for the next writer's cleanup.
  const work = join(dirname(target), tempDirName(basename(target), primary));
  // Without --leave-running CRIU dumps while the first pool image is still
  // being written (to become work): into a working directory of its own,
  // moved into work once that image is complete.
  const criuDir = opts.leaveRunning ? join(work, CRIU_DIR) : join(dirname(target), tempDirName(`${basename(target)}-criu`, primary));
  let whyThroughHost: string | undefined;
  if (opts.leaveRunning && !opts.live && !others.length && !comms.length) {
    const left = await checkpointLeavingRunning(primary, work, CRIU_DIR, criu, dump, { ...opts, finalImage: target });
    if (!('whyNot' in left)) {
      writeProcessInfo(join(work, CRIU_DIR), info);
      packer = packerFor(join(work, CRIU_DIR));
      const packed = await pack(join(work, CRIU_DIR));
      const syncSeconds = await makeDurable(work, pid, 'running');
      await publishImage(work, target, !!opts.force);
      if (left.image.framework) notes.push(describeFrameworkUse(left.image.framework));
      return summaryOf({
        rawBytes: left.image.poolBytes,
        storedBytes: left.image.storedBytes,
        leftRunning: true,
        gpuFreeSeconds: left.gpuFreeSeconds,
        dumpSeconds: left.dumpSeconds,
        syncSeconds: round(syncSeconds),
        pauseSeconds: left.pauseSeconds,
        route: 'gpu',
        phases: left.phases,
        ...packed,
      });
    }
    whyThroughHost = left.whyNot;
  } else if (opts.leaveRunning && !opts.live) {
    whyThroughHost = comms.length ? 'the job runs NCCL; a copy on the GPU serves a job of one process without it' : `the job has ${plan.members.length} CUDA processes; a copy on the GPU serves a job of one`;
  }
  // Each member's pool image: the first at work, the others beside it
  // until the image is complete (then linked under work/members/ too).
  const images = new Map(plan.members.map((m) => [m, m === primary ? work : join(dirname(target), tempDirName(`${basename(target)}-${m}`, m))]));
  const clock = new PhaseClock('checkpoint', t0);
  clock.mark('checks');
  const suspendStart = performance.now();
  // A Ctrl-C from here on brings the job back at the next safe point:
  // once suspended, or once CRIU has written its files.
  const interrupts = opts.leaveRunning
    ? undefined
    : Interrupts.watch('checkpoint', 'the job is brought back at the next safe point, and no image is kept', `the job is left as it is now: running, or held for gpuckpt resume ${pid}`);
  // The ranks at one collective boundary, their communicators torn down:
  // no peer's memory reaches the driver's checkpoint, no NCCL socket CRIU.
  const cut = await JobCut.take(plan.members, comms).catch((e: unknown) => {
    interrupts?.close();
    throw e;
  });
  let suspended: SuspendSummary[];
  // The pool images' codec pools end, and this process lets go of their
  // staging, as each image is complete, while CRIU dumps (it is not the
  // job's memory); the holder, which keeps the data meanwhile, frees it
  // once it sees the processes gone.
  const closing: Promise<void>[] = [];
  try {
    await cut?.teardown();
    clock.mark('cut');
    // Without --leave-running, the pool images are finished while CRIU
    // dumps: the snapshot holder keeps each pool's data meanwhile.
    suspended = await suspendMembers(images, {
      ...opts,
      poolBytes,
      force: false,
      kind: 'process',
      finalImage: target,
      ...(opts.leaveRunning ? {} : { handOff: { halfMade: [criuDir] } }),
      closeLater: (c) => closing.push(c().catch(() => undefined)),
    });
    clock.mark('suspend');
  } catch (e) {
    interrupts?.close();
    await Promise.all(closing);
    const why = await cut?.recover();
    cut?.close();
    throw why ? new GpuckptError(isGpuckptError(e) ? e.code : 'INTERNAL', `${(e as Error).message}; ${why}`) : e;
  }
  // CRIU cannot dump a process connected to this controller.
  cut?.close();
  const d0 = performance.now();
  // The tree's memory now, its pools handed off: at most what CRIU writes.
  scratch = opts.rawCriuPages ? undefined : await makeDumpScratch(plan.tree.reduce((n, p) => n + residentBytes(p.pid), 0));
  const dumpDir = scratch?.dir ?? criuDir;
  packer = packerFor(criuDir, true);
  let dumpSeconds = 0;
  let syncSeconds = 0;
  let resumeFailure: unknown;
  let runsAgain = 0;
  let packed: { criuPages?: PagesSummary } = {};
  const dropMemberImages = () => {
    for (const m of others) rmSync(images.get(m)!, { recursive: true, force: true });
  };
  // Each member's summary once its pool image is complete; observed below, never an unhandled rejection.
  const imagesDone = Promise.all(suspended.map((s) => s.pending ?? s));
  // Their cores are the packer's once they are done (unless --workers says how many).
  imagesDone.then(() => opts.workers === undefined && packer?.grow(defaultWorkerCount()), () => undefined);
  let finished = suspended;
  const dumped = () => {
    dumpSeconds = (performance.now() - d0) / 1000;
    clock.mark('dump');
    if (scratch) moveFiles(scratch.dir, criuDir, PAGES); // the raw pages are the packer's
    writeProcessInfo(criuDir, info);
  };
  /** CRIU's files and every member's pool image made one image, durable, under its name; after: where the tree is meanwhile (makeDurable). */
  const complete = async (after: After) => {
    // CRIU's last pages are compressed while the pool images are finished.
    const packing = pack(criuDir);
    finished = await imagesDone.catch(async (e: unknown) => {
      await packing;
      throw e;
    });
    clock.mark('images');
    for (const m of finished) if (m.framework) notes.push(`process ${m.pid}: ${describeFrameworkUse(m.framework)}`);
    // Linked, not moved: a member held meanwhile (a failure, this
    // controller's end) is resumed from where its shim was told it is.
    if (others.length) {
      mkdirSync(join(work, MEMBERS_DIR), { mode: 0o700 });
      for (const m of others) await linkTree(images.get(m)!, join(work, memberImageDir(m)));
    }
    // CRIU leaves its files to the page cache; the pool images are durable
    // already, and the image is published only once CRIU's part is too.
    packed = await packing;
    if (criuDir !== join(work, CRIU_DIR)) renameSync(criuDir, join(work, CRIU_DIR));
    clock.mark('pack');
    syncSeconds = await makeDurable(work, pid, after);
    clock.mark('sync');
    await publishImage(work, target, !!opts.force);
    clock.mark('publish');
  };
  try {
    try {
      interrupts?.check();
      mkdirSync(criuDir, { mode: 0o700 });
      packer?.follow();
      if (opts.leaveRunning) {
        criuDump(criu, pid, dumpDir, { leaveRunning: true, args: dump.args, logDir: criuDir });
        dumped();
      } else {
        // The tree is ended only once the image is complete: until then a
        // failure, a Ctrl-C, or this controller's end leaves every process running.
        const late = await criuDumpGated(
          criu,
          pid,
          dumpDir,
          dump.args,
          async () => {
            dumped();
            interrupts?.check();
            await complete('gated');
          },
          criuDir,
        );
        if (late) notes.push(late);
        dropMemberImages(); // CRIU has ended the job: the image holds them
        // What described the data the holder kept (it lets go as the processes end).
        for (const m of plan.members) rmSync(defaultHoldDir(m), { recursive: true, force: true });
      }
    } catch (e) {
      // The processes are still there (frozen, or let go by CRIU): bring them
      // back, then drop the half image (kept if a process could not come
      // back: it holds its data).
      const stays = await resumeAfterFailure(await heldOrImages(suspended, images));
      if (!stays.size) for (const image of images.values()) rmSync(image, { recursive: true, force: true });
      rmSync(criuDir, { recursive: true, force: true });
      const nccl = !stays.size && comms.length ? await rebuildJob(plan.members) : undefined;
      throw new GpuckptError(
        isGpuckptError(e) ? e.code : 'CRIU_FAILED',
        `${(e as Error).message}; ${stays.size ? [...stays.values()].join('; ') : `${plan.members.length > 1 ? `processes ${plan.members.join(', ')}` : `process ${pid}`} resumed`}${nccl ? `; ${nccl}` : ''}`,
        isGpuckptError(e) && e.exitStatus !== undefined ? { exitStatus: e.exitStatus } : undefined,
      );
    }
    if (opts.leaveRunning) {
      resumeFailure = (await resumeMembers(images)).find((f) => f !== undefined);
      if (!resumeFailure && comms.length) {
        const why = await rebuildJob(plan.members);
        if (why) resumeFailure = new GpuckptError('NCCL_FAILED', `the job of process ${pid}: ${why}`);
      }
      runsAgain = performance.now();
      clock.mark('resume');
      await complete(resumeFailure ? 'suspended' : 'running');
      if (!resumeFailure) dropMemberImages();
    }
  } finally {
    interrupts?.close();
    await packer?.abandon(); // not finished: the dump failed
    await scratch?.remove();
    await Promise.all(closing);
  }
  if (resumeFailure) throw resumeFailure;
  const pauseStart = Math.min(...finished.map((s) => s.pauseStartSeconds));
  return summaryOf({
    rawBytes: finished.reduce((n, s) => n + s.rawBytes, 0),
    storedBytes: finished.reduce((n, s) => n + s.storedBytes, 0),
    leftRunning: !!opts.leaveRunning,
    gpuFreeSeconds: Math.max(...finished.map((s) => s.gpuFreeSeconds)),
    dumpSeconds: round(dumpSeconds),
    syncSeconds: round(syncSeconds),
    ...packed,
    phases: clock.phases,
    suspendPhases: finished.map((s) => s.phases),
    ...(opts.leaveRunning ? { pauseSeconds: round((runsAgain - suspendStart) / 1000 - pauseStart, 4), route: 'host' as const, whyThroughHost } : {}),
  });
}

/** Where the tree is while its image is completed: running on, suspended (a resume failed), or frozen at CRIU's gate. */
type After = 'running' | 'suspended' | 'gated';

/**
 * fsync of CRIU's files in work; the seconds it took. If that fails the
 * image is not published: a process left running loses nothing (work is
 * removed); one suspended holds its data there (work is kept and named);
 * one at the gate is resumed from it by the caller.
 */
async function makeDurable(work: string, pid: number, after: After): Promise<number> {
  const t0 = performance.now();
  try {
    faultPoint('criu-sync');
    await syncTree(join(work, CRIU_DIR));
    if (existsSync(join(work, MEMBERS_DIR))) await fsyncDir(join(work, MEMBERS_DIR));
    await fsyncDir(work);
    return (performance.now() - t0) / 1000;
  } catch (e) {
    if (after === 'running') rmSync(work, { recursive: true, force: true });
    const where = { running: `; process ${pid} runs on; no image written`, suspended: `; process ${pid} stays suspended; its image is kept, not known durable, at ${work}`, gated: '' }[after];
    throw new GpuckptError('IMAGE_WRITE_FAILED', `cannot make CRIU's files durable: ${osErrorText(e)}${where}`, { cause: e });
  }
}
