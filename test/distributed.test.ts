/**
 * Distributed jobs on the CPU: a launcher and its ranks (test/apps/ddp_app,
 * like torchrun and a DDP script) whose NCCL (the fake libnccl of
 * test/fake-nccl) really exchanges data, so a rank stopped at the wrong
 * point hangs its peers and a wrong restore prints other losses. The job is
 * started as a script starts it (a background job under gpuckpt run) and
 * taken through every verb as one; its losses must equal an uninterrupted
 * run's. What cannot be carried is refused in one line, untouched; a cut
 * that cannot be reached, or a controller killed midway, leaves every rank
 * running or held for `gpuckpt resume`.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { BIN, checkpointingSandbox, eventually, json, TEST_BUILD } from './helpers/e2e.js';

const { box, env } = checkpointingSandbox();
const DDP = join(TEST_BUILD, 'ddp_app');
const jobs: ChildProcess[] = [];
afterAll(() => {
  for (const j of jobs) if (j.exitCode === null) j.kill('SIGKILL');
});

const cli = (args: string[], extra: Record<string, string> = {}) => box.cli(args, { ...env, ...extra });
const oneLine = (stderr: string) => expect(stderr.trimEnd().split('\n')).toHaveLength(1);

interface Job {
  launcher: ChildProcess;
  pid: number;
  out: string;
  ranks: () => number[];
  steps: () => string[];
  ended: Promise<number | null>;
}

/** gpuckpt run [--name] -- ddp_app ARGS, output to a file, as a script's background job. */
async function startJob(name: string, args: string[], extra: Record<string, string> = {}, ready = true): Promise<Job> {
  const dir = box.path(`${name}-${jobs.length}`);
  mkdirSync(join(dir, 'store'), { recursive: true });
  const out = join(dir, 'out');
  const fd = openSync(out, 'a');
  const launcher = spawn(BIN, ['run', '--name', name, '--', DDP, ...args], { env: box.env({ ...env, FAKE_CUDA_CKPT_BLOCK: '1', DDP_STORE: join(dir, 'store'), ...extra }), stdio: ['ignore', fd, fd] });
  closeSync(fd);
  jobs.push(launcher);
  const ended = new Promise<number | null>((res) => launcher.on('exit', (code) => res(code)));
  const text = () => (existsSync(out) ? readFileSync(out, 'utf8') : '');
  const job: Job = {
    launcher,
    pid: launcher.pid!,
    out,
    ranks: () =>
      [...text().matchAll(/^rank (\d+) ready pid (\d+)$/gm)]
        .sort((x, y) => Number(x[1]) - Number(y[1]))
        .map((m) => Number(m[2])),
    steps: () => text().split('\n').filter((l) => / step /.test(l)),
    ended,
  };
  const want = args[0] === 'launch' ? Number(args[1]) : 1;
  if (ready && !(await eventually(() => job.ranks().length === want))) throw new Error(`job did not start: ${text()}`);
  return job;
}

/** The losses of an uninterrupted run of the same shape, sorted. */
function reference(args: string[], extra: Record<string, string> = {}): string[] {
  const store = box.path(`ref-${Math.random().toString(36).slice(2)}`);
  mkdirSync(store);
  const r = spawnSync(DDP, [...args.slice(0, 3), '0'], { env: { ...process.env, LD_LIBRARY_PATH: join(TEST_BUILD, 'fake'), DDP_STORE: store, ...extra }, encoding: 'utf8', timeout: 60_000 });
  expect(r.status).toBe(0);
  return r.stdout.split('\n').filter((l) => / step /.test(l)).sort();
}

/** The launcher and every rank, by PID. */
function endJob(job: Job): void {
  for (const p of [job.pid, ...job.ranks()]) {
    try {
      process.kill(p, 'SIGKILL');
    } catch {
      // gone
    }
  }
}

/** Four more steps within 10 s: a wedged job never makes them, a loaded CI machine may take seconds (a resume rebuilds every communicator). */
async function progresses(job: Job): Promise<boolean> {
  const n = job.steps().length;
  for (let t0 = Date.now(); Date.now() - t0 < 10_000; await new Promise((r) => setTimeout(r, 50))) if (job.steps().length >= n + 4) return true;
  return false;
}

describe('a job of eight ranks, as on an 8-GPU host', () => {
  it('suspend and resume, a live image of every rank, checkpoint --leave-running and checkpoint: the job as one', { timeout: 120_000 }, async () => {
    // Each rank's rebuild request waits for the others on a thread of libuv's
    // pool: with its default 4 threads, the resume hung until NCCL's timeout.
    const job = await startJob('wide', ['launch', '8', '100000', '20']);
    const ranks = job.ranks();
    expect(ranks).toHaveLength(8);
    const s = cli(['suspend', 'wide', '--json']);
    expect(s.stderr).toBe('');
    expect(json(s.stdout)).toMatchObject({ members: ranks, communicators: 1 });
    const r = cli(['resume', 'wide', '--json']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(await progresses(job)).toBe(true);
    const g = cli(['checkpoint', 'wide', '--gpu-only', '-o', box.path('wide-g'), '--json']);
    expect(g.stderr).toBe('');
    expect(json(g.stdout)).toMatchObject({ members: ranks, communicators: 1 });
    expect(readdirSync(join(box.path('wide-g'), 'members'))).toHaveLength(7);
    expect(await progresses(job)).toBe(true);
    const l = cli(['checkpoint', 'wide', '-o', box.path('wide-l'), '--leave-running', '--json']);
    expect(l.stderr).toBe('');
    expect(json(l.stdout)).toMatchObject({ members: ranks, leftRunning: true });
    expect(await progresses(job)).toBe(true);
    const c = cli(['checkpoint', 'wide', '-o', box.path('wide-c'), '--json']);
    expect(c.stderr).toBe('');
    expect(json(c.stdout)).toMatchObject({ members: ranks, leftRunning: false });
    expect(readdirSync(join(box.path('wide-c'), 'members'))).toHaveLength(7);
    endJob(job);
  });
});

describe('a job of two ranks', () => {
  it('every verb on the whole job, by name or launcher PID: losses equal an uninterrupted run', async () => {
    // 12 s of steps: its five commands must all find it running. With 150
    // (3.75 s) it had ended before the fifth on a loaded 2-core machine.
    const args = ['launch', '2', '480', '25'];
    const job = await startJob('ddp', args, { DDP_SPLIT: '1' });
    const [r0, r1] = job.ranks();

    const rows = json<any[]>(cli(['ps', '--json']).stdout).filter((r) => r.job?.launcher === job.pid);
    expect(rows.map((r) => [r.pid, r.job.name, r.nccl])).toEqual([
      [r0, 'ddp', [{ rank: 0, nranks: 2, down: false }, { rank: 0, nranks: 2, down: false }]],
      [r1, 'ddp', [{ rank: 1, nranks: 2, down: false }, { rank: 1, nranks: 2, down: false }]],
    ]);
    expect(cli(['ps']).stdout).toMatch(new RegExp(`^job ${job.pid} \\(ddp\\): 2 CUDA process\\(es\\) ${r0}, ${r1}; GPUs 0; pool .* in use$`, 'm'));

    const g = cli(['checkpoint', 'ddp', '--gpu-only', '-o', box.path('g'), '--json']);
    expect(g.stderr).toBe('');
    expect(json(g.stdout)).toMatchObject({ pid: job.pid, members: [r0, r1], communicators: 2 });
    expect(readdirSync(box.path('g')).sort()).toEqual(['gpuckpt-job.json', 'manifest', 'members', 'pool.zst']);
    expect(json(cli(['inspect', join(box.path('g'), 'members', String(r1)), '--json']).stdout)).toMatchObject({ verified: true });
    expect(await progresses(job)).toBe(true);

    const s = cli(['suspend', String(job.pid), '--json']);
    expect(s.stderr).toBe('');
    expect(json(s.stdout)).toMatchObject({ members: [r0, r1], communicators: 2 });
    const held = job.steps().length;
    await new Promise((r) => setTimeout(r, 300));
    expect(job.steps().length).toBe(held);
    expect(json<any[]>(cli(['ps', '--json']).stdout).find((r) => r.pid === r0).nccl[0]).toEqual({ rank: 0, nranks: 2, down: true });
    const r = cli(['resume', 'ddp', '--json']);
    expect(r.stderr).toBe('');
    expect(json(r.stdout)).toMatchObject({ members: [r0, r1], communicators: 2 });
    expect(await progresses(job)).toBe(true);

    const l = cli(['checkpoint', 'ddp', '-o', box.path('l'), '--leave-running', '--json']);
    expect(l.stderr).toBe('');
    expect(json(l.stdout)).toMatchObject({ members: [r0, r1], leftRunning: true, whyThroughHost: 'the job runs NCCL; a copy on the GPU serves a job of one process without it' });
    expect(readdirSync(join(box.path('l'), 'members'))).toEqual([String(r1)]);
    expect(await progresses(job)).toBe(true);

    expect(await job.ended).toBe(0);
    expect(job.steps().sort()).toEqual(reference(args, { DDP_SPLIT: '1' }));
  });

  it('checkpoint stops the whole job with its communicators torn down', async () => {
    // Each communicator runs a thread like NCCL's UDS service thread, which
    // reads its stop flag only when its poll returns: the teardown wakes it.
    const job = await startJob('ddp-stop', ['launch', '2', '400', '25'], { FAKE_NCCL_UDS: '1' });
    const c = cli(['checkpoint', String(job.pid), '-o', box.path('c'), '--json']);
    expect(c.stderr).toBe('');
    expect(json(c.stdout)).toMatchObject({ members: job.ranks(), leftRunning: false });
    const ends = readFileSync(job.out, 'utf8').match(/UDS thread ended .*/g);
    expect(ends).toEqual(['UDS thread ended by a datagram', 'UDS thread ended by a datagram']);
    // The fake CRIU stops the tree; the real one ends it.
    const dumped = json(readFileSync(join(box.path('c'), 'criu', 'fake-criu.json'), 'utf8'));
    expect(dumped.tree.map(Number).sort()).toEqual([job.pid, ...job.ranks()].sort());
    // Its restore makes the communicators again.
    expect(json(readFileSync(join(box.path('c'), 'criu', 'gpuckpt-process.json'), 'utf8'))).toMatchObject({ nccl: true });
    endJob(job);
  });
});

describe('a launcher that starts the driver but makes no context (torchrun)', () => {
  it('is given no context by any verb, while the ranks still pin their staging', async () => {
    // A context is ~520 MiB of GPU state that every driver checkpoint of the
    // launcher would then save: staging had been pinned through one.
    const job = await startJob('idle-launcher', ['launch', '2', '100000', '20'], { DDP_LAUNCHER_CUDA: '1', DDP_BUFFER_MIB: '256', FAKE_CUDA_TRACE: box.path('trace-%p') });
    const calls = (pid: number) => readFileSync(box.path(`trace-${pid}`), 'utf8').split('\n');
    expect(calls(job.pid)).toContain('cuInit');
    for (const verb of [['checkpoint', '--gpu-only', '-o', box.path('idle-g')], ['suspend'], ['resume'], ['checkpoint', '--leave-running', '-o', box.path('idle-l')]]) {
      const r = cli([verb[0]!, 'idle-launcher', ...verb.slice(1)], verb[0] === 'resume' ? { GPUCKPT_LOG: 'debug' } : {});
      if (verb[0] === 'resume') {
        // Its driver restore, which would slow the ranks', comes after theirs
        // and after they pinned their staging (ThawOrder).
        const thawed = [...r.stderr.matchAll(/resume (\d+): driverRestore done/g)].map((m) => Number(m[1]));
        expect(thawed).toHaveLength(3);
        expect(thawed.at(-1)).toBe(job.pid);
        const launcherThawed = r.stderr.indexOf(`resume ${job.pid}: driverRestore done`);
        for (const rank of job.ranks()) {
          const pinned = r.stderr.search(new RegExp(`resume ${rank}: (pin|given) done`));
          expect(pinned).toBeGreaterThan(-1);
          expect(pinned).toBeLessThan(launcherThawed);
        }
      } else expect([verb[0], r.stderr]).toEqual([verb[0], '']);
      if (verb[0] !== 'suspend') expect(await progresses(job)).toBe(true);
    }
    expect(calls(job.pid).filter((c) => /^cu(DevicePrimaryCtxRetain|CtxCreate|MemHostRegister)/.test(c))).toEqual([]);
    expect(calls(job.ranks()[1]!)).toContain('cuMemHostRegister_v2');
    // Its empty pool gets one codec worker, the ranks' pools the rest (memberShares).
    const g = cli(['checkpoint', 'idle-launcher', '--gpu-only', '--workers', '9', '-o', box.path('idle-w')], { GPUCKPT_LOG: 'debug' });
    // Each pool is set up (staging faulted in) while the job trains; the ranks are held only after.
    const held = g.stderr.indexOf('job: cut held');
    expect(held).toBeGreaterThan(-1);
    for (const m of [job.pid, ...job.ranks()]) {
      const setUp = g.stderr.indexOf(`pool image ${m}: setup done`);
      expect(setUp).toBeGreaterThan(-1);
      expect(setUp).toBeLessThan(held);
    }
    // Started as the command started, shared out as each pool image begins.
    expect([...g.stderr.matchAll(/codec: (\d+) workers started/g)].map((m) => Number(m[1]))).toEqual([9]);
    expect([...g.stderr.matchAll(/codec: (\d+) of the \d+ workers started ahead taken/g)].map((m) => Number(m[1])).sort()).toEqual([1, 4, 4]);
    endJob(job);
  });
});

describe('a rank on a GPU other than 0', () => {
  it("gains no context on GPU 0 from the cut: NCCL's teardown sets back the device it found, 0 on a thread without one", async () => {
    const args = ['launch', '2', '400', '10'];
    const two = { FAKE_CUDA_DEVICES: '2' };
    const job = await startJob('gpu1-rank', args, { ...two, FAKE_CUDA_TRACE: box.path('ctx-%p') });
    const made = (pid: number) => readFileSync(box.path(`ctx-${pid}`), 'utf8').split('\n').filter((l) => l.startsWith('primary context made'));
    const [r0, r1] = job.ranks() as [number, number];
    // The suspend first, as for a job parked just after its start: its control thread had made no context yet.
    expect(cli(['suspend', String(job.pid)]).code).toBe(0);
    expect(cli(['resume', String(job.pid)]).code).toBe(0);
    expect(new Set(made(r1))).toEqual(new Set(['primary context made on device 1']));
    expect(new Set(made(r0))).toEqual(new Set(['primary context made on device 0']));
    expect(await job.ended).toBe(0);
    expect(job.steps().sort()).toEqual(reference(args, two));
  });
});

describe('a checkpoint that fails after the dump', () => {
  it("its image not made complete while CRIU waits: every rank resumed from its pool image, the job trains on, no image", async () => {
    const args = ['launch', '2', '400', '10'];
    const job = await startJob('ddp-unsynced', args);
    const [r0, r1] = job.ranks();
    const out = box.path('unsynced');
    // Failed after the second rank's pool image went into the job's image (members/PID).
    const c = cli(['checkpoint', String(job.pid), '-o', out], { GPUCKPT_TEST_FAULT: 'criu-sync' });
    expect(c.stderr).toMatch(new RegExp(`^gpuckpt: cannot make CRIU's files durable: injected fault at criu-sync .*; processes ${r0}, ${r1} resumed\\n$`));
    expect(existsSync(out)).toBe(false);
    expect(readdirSync(box.dir).filter((n) => n.includes('gpuckpt-tmp'))).toEqual([]);
    expect(await job.ended).toBe(0);
    expect(job.steps().sort()).toEqual(reference(args));
  });
});

describe('refused before anything is touched', () => {
  it('one rank alone, by every verb: one line, the job trains on', async () => {
    const job = await startJob('alone', ['launch', '2', '2000', '10']);
    const rank1 = job.ranks()[1]!;
    for (const [args, pattern] of [
      [['suspend', String(rank1)], new RegExp(`^gpuckpt: NCCL communicator \\w+ of process ${rank1} has 2 ranks and only 1 in it \\(rank 1 is process ${rank1}\\): stopping part of it would stop the others at their next collective; suspend the whole job instead: gpuckpt suspend ${job.pid}\\n$`)],
      [['checkpoint', String(rank1), '-o', box.path('x')], /checkpoint the whole job instead: gpuckpt checkpoint \d+\n$/],
      [['checkpoint', String(rank1), '--gpu-only', '-o', box.path('x')], /checkpoint the whole job instead/],
      [['migrate', String(rank1), '--to-device', '0'], /a migrate moves one process alone; move its job instead: gpuckpt suspend JOB, then gpuckpt resume JOB --device 0\n$/],
    ] as const) {
      const r = cli([...args]);
      expect(r.code).toBe(3);
      expect(r.stderr).toMatch(pattern);
      oneLine(r.stderr);
      expect(existsSync(box.path('x'))).toBe(false);
      expect(await progresses(job)).toBe(true);
    }
    endJob(job);
  });

  it('a communicator with a rank in another job, and registered buffers', async () => {
    const store = box.path('split-store');
    mkdirSync(store);
    const a = await startJob('part-a', ['rank', '0', '2', '2000', '10'], { DDP_STORE: store }, false);
    const b = await startJob('part-b', ['rank', '1', '2', '2000', '10'], { DDP_STORE: store }, false);
    expect(await eventually(() => a.ranks().length === 1 && b.ranks().length === 1)).toBe(true);
    const r = cli(['suspend', 'part-a']);
    expect(r.stderr).toMatch(/^gpuckpt: NCCL communicator \w+ of process \d+ has 2 ranks and only 1 in it \(rank 0 is process \d+\): stopping part of it would stop the others at their next collective; suspend a process whose descendants hold every rank \(the job's launcher\)\n$/);
    expect(await progresses(a)).toBe(true);
    for (const j of [a, b]) endJob(j);

    const reg = await startJob('registered', ['launch', '2', '2000', '10'], { DDP_REGISTER: '1' });
    const g = cli(['checkpoint', 'registered', '--gpu-only', '-o', box.path('reg')]);
    expect(g.stderr).toMatch(/^gpuckpt: process \d+ communicator \w+ \(rank 0 of 2\) has 1 buffers registered with ncclCommRegister, which a communicator made again would not have; deregister them first/);
    oneLine(g.stderr);
    expect(existsSync(box.path('reg'))).toBe(false);
    expect(await progresses(reg)).toBe(true);
    endJob(reg);
  });

  it('a cut not reached in time is let go: one line, the job runs on', async () => {
    const job = await startJob('stuck', ['launch', '2', '2000', '10']);
    const [r0, r1] = job.ranks() as [number, number];
    // Rank 1 busy outside NCCL for 3 s: rank 0 waits inside its next
    // collective, and rank 1 cannot catch up in time.
    process.kill(r1, 'SIGUSR1');
    await new Promise((r) => setTimeout(r, 200));
    const s = cli(['suspend', String(job.pid)], { GPUCKPT_CUT_TIMEOUT: '0.5' });
    expect(s.stderr).toMatch(new RegExp(`^gpuckpt: the ranks did not reach a common collective boundary in 0.5 s \\(process ${r0} inside 1 NCCL call\\(s\\), process ${r1} at collective \\d+ of \\d+ on communicator \\w+\\); the job runs on as it was\\n$`));
    const trainsOn = async () => {
      const n = job.steps().length;
      for (let i = 0; i < 100 && job.steps().length < n + 4; i++) await new Promise((r) => setTimeout(r, 100));
      expect(job.steps().length).toBeGreaterThanOrEqual(n + 4);
    };
    await trainsOn();
    // A live image's pools are set up first, then the cut is let go the same way: no image.
    process.kill(r1, 'SIGUSR1');
    await new Promise((r) => setTimeout(r, 200));
    const g = cli(['checkpoint', String(job.pid), '--gpu-only', '-o', box.path('stuck-g')], { GPUCKPT_CUT_TIMEOUT: '0.5' });
    expect(g.stderr).toMatch(/^gpuckpt: the ranks did not reach a common collective boundary in 0\.5 s \(.*\); the job runs on as it was\n$/);
    expect(readdirSync(dirname(box.path('stuck-g'))).filter((n) => n.includes('stuck-g'))).toEqual([]);
    await trainsOn();
    endJob(job);
  });
});

describe('the controller killed', () => {
  it('at random points of a job suspend: every rank runs on, or resume brings the job back', async () => {
    // Long enough to outlive the eight rounds (three commands each): with 600
    // steps the job could end before the last, and a round then saw no step.
    const args = ['launch', '2', '2000', '10'];
    const job = await startJob('killed', args);
    for (let round = 0; round < 8; round++) {
      const child = box.cliAsync(['suspend', 'killed'], env);
      const exited = new Promise((r) => child.on('exit', r));
      await new Promise((r) => setTimeout(r, 40 + round * 45));
      child.kill('SIGKILL');
      await exited;
      const rows = json<any[]>(cli(['ps', '--json']).stdout).filter((r) => r.job?.launcher === job.pid);
      const r = cli(['resume', 'killed']);
      // Held (suspended, or its communicators down): resume brings it back;
      // not yet held, or let go when its holder left: nothing to resume.
      if (rows.some((r) => r.poolState === 'suspended' || r.nccl.some((c: { down: boolean }) => c.down))) expect(r.stderr).toBe('');
      else expect(r.stderr).toMatch(/^gpuckpt: (the job of process \d+ is not suspended|.*)\n$/);
      expect(await progresses(job)).toBe(true);
    }
    expect(await job.ended).toBe(0);
    expect(job.steps().sort()).toEqual(reference(args));
  });
});

describe('the controller killed during a whole-job checkpoint', () => {
  it('at growing delays until an image is out: the job runs on, or resume brings it back, or the image is complete', { timeout: 120_000 }, async () => {
    const args = ['launch', '2', '100000', '10'];
    const job = await startJob('killed-ckpt', args);
    const out = box.path('killed-ckpt-image');
    /** CRIU still dumping this job (it may wait at gpuckpt's gate, which the controller's end answers). */
    const dumping = () =>
      readdirSync('/proc')
        .filter((d) => /^\d+$/.test(d))
        .some((d) => {
          try {
            const argv = readFileSync(`/proc/${d}/cmdline`, 'utf8').split('\0');
            return argv.includes('dump') && argv.includes(String(job.pid)) && argv.some((a) => a.endsWith('fake-criu/criu'));
          } catch {
            return false;
          }
        });
    const seen = { running: 0, resumed: 0 };
    for (let round = 0; !existsSync(out); round++) {
      expect(round).toBeLessThan(40);
      const child = box.cliAsync(['checkpoint', 'killed-ckpt', '-o', out], env);
      const exited = new Promise((r) => child.on('exit', r));
      await new Promise((r) => setTimeout(r, 100 + round * 120));
      child.kill('SIGKILL');
      await exited;
      for (let t0 = Date.now(); dumping(); await new Promise((r) => setTimeout(r, 20))) expect(Date.now() - t0).toBeLessThan(20_000);
      if (existsSync(out)) break;
      const rows = json<any[]>(cli(['ps', '--json']).stdout).filter((r) => r.job?.launcher === job.pid);
      const held = rows.some((r) => r.poolState === 'suspended' || r.nccl.some((c: { down: boolean }) => c.down));
      const r = cli(['resume', 'killed-ckpt']);
      if (held) expect(r.stderr).toBe('');
      seen[held ? 'resumed' : 'running']++;
      expect(await progresses(job)).toBe(true);
    }
    // Published only once complete: it verifies, and the job was ended (the fake CRIU stops it).
    expect(json(cli(['inspect', out, '--json']).stdout)).toMatchObject({ verified: true });
    expect(json(readFileSync(join(out, 'criu', 'gpuckpt-process.json'), 'utf8'))).toMatchObject({ members: job.ranks() });
    expect(seen.running + seen.resumed).toBeGreaterThan(0);
    console.log(`killed whole-job checkpoints before the image was out: ${JSON.stringify(seen)}`);
    endJob(job);
  });
});

describe('the controller killed during a job --gpu-only image', () => {
  it('at growing delays until an image is out: the job trains on each time, and no half-made image is left', { timeout: 120_000 }, async () => {
    const job = await startJob('killed-live', ['launch', '2', '100000', '10'], { DDP_BUFFER_MIB: '64' });
    const dir = box.path('killed-live');
    mkdirSync(dir);
    const out = join(dir, 'image');
    let killed = 0;
    for (let round = 0; !existsSync(out); round++) {
      expect(round).toBeLessThan(40);
      const child = box.cliAsync(['checkpoint', 'killed-live', '--gpu-only', '-o', out], env);
      const exited = new Promise((r) => child.on('exit', r));
      // Set-up, the cut, the pauses and the writing each get their turn.
      await new Promise((r) => setTimeout(r, 60 + round * 60));
      child.kill('SIGKILL');
      await exited;
      if (existsSync(out)) break;
      killed++;
      // Never held past its controller: the ranks go on with no resume.
      expect(await progresses(job)).toBe(true);
    }
    expect(json(cli(['inspect', out, '--json']).stdout)).toMatchObject({ verified: true });
    // What the killed ones left, the next one swept: only the image is there.
    expect(cli(['checkpoint', 'killed-live', '--gpu-only', '-o', join(dir, 'again')]).code).toBe(0);
    expect(readdirSync(dir).sort()).toEqual(['again', 'image']);
    expect(killed).toBeGreaterThan(0);
    console.log(`killed job --gpu-only images before one was out: ${killed}`);
    expect(await progresses(job)).toBe(true);
    endJob(job);
  });
});

describe('a rebuild a rank never joins', () => {
  it('is given up at GPUCKPT_NCCL_TIMEOUT: the rank still answers, and the next resume brings the job back', async () => {
    const args = ['launch', '2', '300', '10'];
    const job = await startJob('unjoined', args, { GPUCKPT_NCCL_TIMEOUT: '1' });
    expect(cli(['suspend', 'unjoined']).code).toBe(0);
    // The first rank is asked to make its communicator again, the second never is.
    const r = cli(['resume', 'unjoined'], { GPUCKPT_TEST_FAULT: 'rebuild' });
    expect(r.stderr).toMatch(/^gpuckpt: injected fault at rebuild \(GPUCKPT_TEST_FAULT\); the ranks wait, their communicators down: gpuckpt resume \d+ makes them again\n$/);
    await new Promise((res) => setTimeout(res, 1500));
    // Its control thread was not held by NCCL's wait: it answers, its communicator still down.
    const rows = json<any[]>(cli(['ps', '--json']).stdout).filter((row) => row.job?.launcher === job.pid);
    expect(rows.map((row) => row.nccl[0].down)).toEqual([true, true]);
    const again = cli(['resume', 'unjoined']);
    expect(again.stderr).toBe('');
    expect(await job.ended).toBe(0);
    expect(job.steps().sort()).toEqual(reference(args));
  });
});
