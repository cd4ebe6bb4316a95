// Distributed jobs (part of npm run test:gpu; two GPUs): a 2-rank PyTorch
// DDP job started as users start it, a script's background job
// `gpuckpt run --name N -- torchrun --standalone --nproc_per_node=2
// ddp_train.py > log 2>&1 &`, taken through every verb on the whole job:
//   distributed/ddp       ps (the job, its ranks, GPUs, pools);
//                         checkpoint JOB --gpu-only; suspend JOB (no rank
//                         holds GPU memory) and resume; checkpoint JOB
//                         --leave-running; checkpoint JOB (the job is gone,
//                         the GPUs free); restore --detach --device 1 (rank 0
//                         on GPU 1, rank 1 on GPU 0). Every rank's losses,
//                         all-reduced losses and buffer checksums are bit
//                         identical to an uninterrupted run.
//   distributed/refused   what must be refused, in one line, untouched, the
//                         job training on: one rank alone (suspend, migrate,
//                         checkpoint); a job whose communicator has a rank in
//                         another job (two `gpuckpt run`s of one rank each).
//   distributed/killed    the controller SIGKILLed at points of a job's
//                         suspend and checkpoint --gpu-only: every rank runs
//                         on, or `gpuckpt resume JOB` brings the job back; the
//                         losses stay bit identical to an uninterrupted run.
//   distributed/bench     (GPU_TEST_DDP_BENCH=1, or npm run bench): the job's
//                         times beside one rank alone and beside a single
//                         process of the same total memory, GPU_TEST_DDP_RUNS
//                         runs each (default 3), the shapes taking turns;
//                         medians to $BENCH_OUT, else $OUT, as ddp.json
//                         (bench-report.mjs). The anchor (driver API +
//                         CRIU) is tried on the job too.
//                         GPU_TEST_DDP_SHAPES (job,rank,single) picks the
//                         shapes; GPU_TEST_DDP_CYCLES adds checkpoint and
//                         restore cycles with CRIU's pages raw, restores
//                         from a cold page cache and restores through
//                         /dev/shm, not huge pages (raw,cold,raw_cold,shm);
//                         GPU_TEST_DDP_PROBE=1 lists the GPUs holding each
//                         process's contexts (nvidia-smi), runs
//                         probes/criu_pages.mjs on each shape's first
//                         image, and smaps_top.mjs on
//                         its processes while suspended; BENCH_TRACE=1 keeps
//                         each checkpoint's and restore's trace and CRIU's
//                         logs in $OUT (traces.mjs).
// One `measure` line per verb with its times.
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { readProcFile } from './proc-files.mjs';
import { appTraceEnv, keepAppLog, keepCriuLog, keptRestoreLog, traced } from './traces.mjs';

export async function runDistributed(h) {
  const { ROOT, BIN_DIR, GPUCKPT, test, Skip, failure, sleep, cliJson, runCli, measure, tmpRoot, gpuUuids, gpuMemoryOf, gpuInfo, say, running, endPids } = h;
  const SCRIPT = path.join(ROOT, 'test', 'gpu', 'apps', 'ddp_train.py');
  const why = () =>
    (gpuUuids().length < 2 && 'needs two GPUs') ||
    (spawnSync('python3', ['-c', 'import torch; assert torch.cuda.device_count() >= 2 and torch.distributed.is_nccl_available()']).status !== 0 && 'no PyTorch with NCCL here') ||
    (spawnSync('criu', ['--version']).status !== 0 && 'criu not on PATH (source .device/setup.sh)');
  const sh = (s) => `'${String(s).replace(/'/g, `'\\''`)}'`;
  const started = new Set(); // PIDs this scenario made (launched or restored): ended by PID at the end
  const endAll = () => endPids(started);
  const freePort = () =>
    new Promise((res) => {
      const s = net.createServer().listen(0, '127.0.0.1', () => {
        const { port } = s.address();
        s.close(() => res(port));
      });
    });

  /** A script's background job: prints the launcher's PID and ends. */
  function startJob(dir, name, args, env) {
    const exports = Object.entries(env).map(([k, v]) => `export ${k}=${sh(v)}; `).join('');
    const r = spawnSync('bash', ['-c', `${exports}${sh(GPUCKPT)} run --name ${name} -- ${args.map(sh).join(' ')} >${sh(path.join(dir, `${name}.log`))} 2>&1 </dev/null & echo $!`], { cwd: dir, encoding: 'utf8' });
    const pid = Number(r.stdout.trim());
    if (!pid) throw failure(`could not start ${name}: ${r.stderr}`);
    started.add(pid);
    return pid;
  }
  const lines = (dir, rank) => {
    try {
      return fs.readFileSync(path.join(dir, `rank${rank}.txt`), 'utf8').trim().split('\n').filter(Boolean);
    } catch {
      return [];
    }
  };
  const log = (dir, name) => {
    try {
      return fs.readFileSync(path.join(dir, `${name}.log`), 'utf8').trim().split('\n').slice(-3).join(' | ');
    } catch {
      return '';
    }
  };
  async function untilStep(dir, n, what, ms = 180_000, nproc = 2) {
    const t0 = Date.now();
    while (Math.min(...[0, 1].slice(0, nproc).map((r) => lines(dir, r).length)) < n) {
      if (Date.now() - t0 > ms) throw failure(`${what}: the job did not reach step ${n} (${lines(dir, 0).length}, ${lines(dir, 1).length} lines): ${log(dir, 'ddp')}`);
      await sleep(100);
    }
  }
  async function untilGone(pid, what, ms = 300_000) {
    const t0 = Date.now();
    while (running(pid)) {
      if (Date.now() - t0 > ms) throw failure(`${what}: process ${pid} still runs`);
      await sleep(100);
    }
  }
  /** Until no process, not even a zombie, holds a PID of pids: what a restore under them needs. */
  async function untilPidsFree(pids, what, ms = 30_000) {
    const t0 = Date.now();
    while (pids.some((p) => fs.existsSync(`/proc/${p}`))) {
      if (Date.now() - t0 > ms) throw failure(`${what}: a PID of ${pids.join(', ')} is still taken`);
      await sleep(20);
    }
  }
  const ranksOf = (launcher) => {
    const kids = [];
    // A thread or process may end while it is read: what is gone has no children.
    const walk = (p) => {
      let tasks = [];
      try {
        tasks = fs.readdirSync(`/proc/${p}/task`);
      } catch (e) {
        if (e.code !== 'ENOENT') throw e;
      }
      for (const t of tasks)
        for (const c of readProcFile(`/proc/${p}/task/${t}/children`).split(' ').filter(Boolean)) {
          kids.push(Number(c));
          walk(Number(c));
        }
    };
    walk(launcher);
    return kids.filter((k) => readProcFile(`/proc/${k}/maps`).includes('libgpuckpt.so') && Object.keys(gpuMemoryOf(k)).length);
  };
  const ENV = { NCCL_NVLS_ENABLE: '0', TORCH_SYMM_MEM_DISABLE_MULTICAST: '1', PYTHONUNBUFFERED: '1' };
  const torchrun = ['torchrun', '--standalone', '--nproc_per_node=2', SCRIPT];

  async function reference(steps) {
    const dir = fs.mkdtempSync(path.join(tmpRoot, 'ddp-ref-'));
    const r = spawnSync('torchrun', ['--standalone', '--nproc_per_node=2', SCRIPT], { cwd: dir, encoding: 'utf8', timeout: 300_000, env: { ...process.env, ...ENV, DDP_OUT: dir, DDP_STEPS: String(steps) } });
    if (r.status !== 0) throw failure(`uninterrupted run failed: ${(r.stderr || '').trim().split('\n').slice(-3).join(' | ')}`);
    return [lines(dir, 0), lines(dir, 1)];
  }

  await test('distributed/ddp', async () => {
    const no = why();
    if (no) throw new Skip(no);
    const steps = Number(process.env.GPU_TEST_DDP_STEPS ?? 60);
    const want = reference(steps);
    want.catch(() => undefined);
    const dir = fs.mkdtempSync(path.join(tmpRoot, 'ddp-'));
    const m = {};
    const table = [];
    try {
      const job = startJob(dir, 'ddp', torchrun, { ...ENV, DDP_OUT: dir, DDP_STEPS: String(steps), DDP_STEP_SLEEP: '0.2' });
      await untilStep(dir, 3, 'start');
      for (const r of ranksOf(job)) started.add(r);
      const ps = await cliJson(['ps', '--json']);
      const ranks = ps.filter((r) => r.job?.launcher === job && r.nccl.length);
      if (ranks.length !== 2 || ranks.some((r) => r.job.name !== 'ddp' || r.nccl.length < 1)) throw failure(`ps: ${JSON.stringify(ranks.map((r) => ({ pid: r.pid, job: r.job, nccl: r.nccl })))}`);
      table.push('ps: pass');

      const g = await cliJson(['checkpoint', 'ddp', '--gpu-only', '-o', path.join(dir, 'G'), '--json'], 300_000);
      if (!(g.members?.length >= 2) || !fs.existsSync(path.join(dir, 'G', 'members'))) throw failure(`gpu-only: ${JSON.stringify(g).slice(0, 300)}`);
      Object.assign(m, { gpu_only_cut_s: g.cutSeconds, gpu_only_pause_s: g.pauseSeconds, gpu_only_s: g.seconds, gpu_only_raw_GB: g.rawBytes / 1e9 });
      table.push('checkpoint --gpu-only: pass');
      await untilStep(dir, lines(dir, 0).length + 2, 'after gpu-only');

      const s = await cliJson(['suspend', String(job), '--json'], 300_000);
      const held = ranksOf(job);
      if (held.length) throw failure(`suspend: ranks ${held.join(', ')} still hold GPU memory`);
      const n = lines(dir, 0).length;
      await sleep(1000);
      if (lines(dir, 0).length !== n) throw failure('suspend: the job trained on while suspended');
      const r = await cliJson(['resume', String(job), '--json'], 300_000);
      Object.assign(m, { suspend_cut_s: s.cutSeconds, suspend_teardown_s: s.teardownSeconds, suspend_gpu_free_s: s.gpuFreeSeconds, suspend_s: s.seconds, resume_rebuild_s: r.rebuildSeconds, resume_s: r.seconds });
      table.push('suspend/resume: pass');
      await untilStep(dir, n + 2, 'after resume');

      const l = await cliJson(['checkpoint', String(job), '-o', path.join(dir, 'L'), '--leave-running', '--json'], 300_000);
      Object.assign(m, { leave_pause_s: l.pauseSeconds, leave_s: l.seconds, leave_dump_s: l.dumpSeconds });
      table.push('checkpoint --leave-running: pass');
      await untilStep(dir, lines(dir, 0).length + 2, 'after --leave-running');

      const c = await cliJson(['checkpoint', 'ddp', '-o', path.join(dir, 'C'), '--json'], 300_000);
      await untilGone(job, 'after checkpoint', 30_000);
      Object.assign(m, { ckpt_s: c.seconds, ckpt_gpu_free_s: c.gpuFreeSeconds, ckpt_dump_s: c.dumpSeconds, ckpt_stored_GB: c.storedBytes / 1e9 });
      table.push('checkpoint: pass');

      const t0 = Date.now();
      const rs = await cliJson(['restore', path.join(dir, 'C'), '--detach', '--device', '1', '--json'], 300_000);
      m.restore_s = (Date.now() - t0) / 1000;
      m.restore_criu_s = rs.criuSeconds;
      started.add(rs.pid);
      table.push('restore --device 1 (ranks swapped): pass');
      await untilGone(job, 'the restored job', 600_000);
      const got = [lines(dir, 0), lines(dir, 1)];
      const ref = await want;
      for (const rank of [0, 1]) {
        if (got[rank].at(-1) !== 'done') throw failure(`rank ${rank} did not finish: ${got[rank].at(-1)} (${log(dir, 'ddp')})`);
        const diff = ref[rank].findIndex((x, i) => got[rank][i] !== x);
        if (diff >= 0 || got[rank].length !== ref[rank].length) throw failure(`rank ${rank} step ${diff}: ${got[rank][diff]} vs ${ref[rank][diff]} uninterrupted`);
      }
    } finally {
      endAll();
      for (const img of ['G', 'L', 'C']) fs.rmSync(path.join(dir, img), { recursive: true, force: true });
    }
    measure('distributed/ddp', m);
    say(`# distributed/ddp: ${table.join('; ')}`);
    return `${steps} steps of both ranks bit-identical to an uninterrupted run across ${table.length} verbs`;
  });

  await test('distributed/refused', async () => {
    const no = why();
    if (no) throw new Skip(no);
    const dir = fs.mkdtempSync(path.join(tmpRoot, 'ddp-refused-'));
    const refusals = [];
    const refuse = async (args, pattern, jobDir) => {
      const before = lines(jobDir, 0).length;
      const r = await runCli(args, 120_000);
      const line = r.stderr.trim();
      if (r.code === 0 || !pattern.test(line) || line.includes('\n')) throw failure(`gpuckpt ${args.join(' ')}: exit ${r.code}: ${line}`);
      await untilStep(jobDir, before + 2, `after the refused ${args[0]}`);
      refusals.push(line);
      say(`# refused: ${line}`);
    };
    try {
      const steps = 400;
      const job = startJob(dir, 'ddp', torchrun, { ...ENV, DDP_OUT: dir, DDP_STEPS: String(steps), DDP_STEP_SLEEP: '0.2', DDP_BUFFER_GIB: '0.25' });
      await untilStep(dir, 2, 'start');
      const ranks = ranksOf(job).sort((a, b) => a - b);
      for (const r of ranks) started.add(r);
      const rank1 = ranks.at(-1);
      await refuse(['suspend', String(rank1)], /^gpuckpt: NCCL communicator \w+ of process \d+ has 2 ranks and only 1 in it .*suspend the whole job instead: gpuckpt suspend \d+$/, dir);
      await refuse(['migrate', String(rank1), '--to-device', '0'], /a migrate moves one process alone/, dir);
      await refuse(['checkpoint', String(rank1), '-o', path.join(dir, 'X')], /has 2 ranks and only 1 in it/, dir);
      if (fs.existsSync(path.join(dir, 'X'))) throw failure('a refused checkpoint left an image');
      process.kill(job, 'SIGTERM');
      await untilGone(job, 'the refused job', 60_000);

      // Two jobs of one rank each, one communicator between them.
      const port = await freePort();
      const split = fs.mkdtempSync(path.join(tmpRoot, 'ddp-split-'));
      const common = { ...ENV, DDP_OUT: split, DDP_STEPS: String(steps), DDP_STEP_SLEEP: '0.2', DDP_BUFFER_GIB: '0.25', WORLD_SIZE: '2', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port) };
      const a = startJob(split, 'ranka', ['python3', SCRIPT], { ...common, RANK: '0', LOCAL_RANK: '0' });
      const b = startJob(split, 'rankb', ['python3', SCRIPT], { ...common, RANK: '1', LOCAL_RANK: '1' });
      await untilStep(split, 2, 'the split job');
      await refuse(['checkpoint', 'ranka', '--gpu-only', '-o', path.join(split, 'Y')], /has 2 ranks and only 1 in it/, split);
      await refuse(['suspend', String(b)], /has 2 ranks and only 1 in it/, split);
      process.kill(a, 'SIGTERM');
      process.kill(b, 'SIGTERM');
    } finally {
      endAll();
    }
    return `refused in one line, nothing touched, the job trained on: ${refusals.map((l) => `"${l.slice(9, 110)}…"`).join('; ')}`;
  });

  await test('distributed/killed', async () => {
    const no = why();
    if (no) throw new Skip(no);
    const steps = 80;
    const want = reference(steps);
    want.catch(() => undefined);
    const dir = fs.mkdtempSync(path.join(tmpRoot, 'ddp-killed-'));
    const rounds = [];
    try {
      const job = startJob(dir, 'ddp', torchrun, { ...ENV, DDP_OUT: dir, DDP_STEPS: String(steps), DDP_STEP_SLEEP: '0.1' }); // the reference's buffer size
      await untilStep(dir, 3, 'start');
      for (const r of ranksOf(job)) started.add(r);
      // Killed at points spread over the command (node's own start takes about 0.3 s of it).
      for (const [i, ms] of [250, 450, 650, 900, 1200, 1600].entries()) {
        const verb = i % 2 ? ['checkpoint', 'ddp', '--gpu-only', '-o', path.join(dir, `K${i}`)] : ['suspend', 'ddp'];
        const child = spawn(GPUCKPT, verb, { stdio: 'ignore', env: { ...process.env, ...ENV } });
        const exited = new Promise((res) => child.on('exit', res));
        await sleep(ms);
        child.kill('SIGKILL'); // by PID: the controller this test started
        await exited;
        const rows = (await cliJson(['ps', '--json'])).filter((r) => r.job?.launcher === job);
        const held = rows.some((r) => r.poolState === 'suspended' || r.nccl?.some((c) => c.down));
        const r = await runCli(['resume', 'ddp'], 300_000);
        if (r.code !== 0 && (held || !/is not suspended/.test(r.stderr))) throw failure(`${verb[0]} killed after ${ms} ms (${held ? 'job held' : 'job not held'}): resume: ${r.stderr.trim()}`);
        rounds.push(`${verb[0]} killed after ${ms} ms: ${held ? 'resumed' : 'ran on'}`);
        await untilStep(dir, lines(dir, 0).length + 2, `after ${verb[0]} killed after ${ms} ms`);
      }
      await untilGone(job, 'the job', 600_000);
      const got = [lines(dir, 0), lines(dir, 1)];
      const ref = await want;
      for (const rank of [0, 1]) {
        const diff = ref[rank].findIndex((x, i) => got[rank][i] !== x);
        if (diff >= 0 || got[rank].length !== ref[rank].length) throw failure(`rank ${rank} step ${diff}: ${got[rank][diff]} vs ${ref[rank][diff]} uninterrupted (${rounds.join('; ')})`);
      }
    } finally {
      endAll();
    }
    return `the controller killed ${rounds.length} times, every rank ran on or was resumed, ${steps} steps bit-identical to an uninterrupted run: ${rounds.join('; ')}`;
  });

  // ------------------------------------------------------------ benchmark --

  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const du = (d) => Number((spawnSync('du', ['-sb', d], { encoding: 'utf8' }).stdout || '0').split('\t')[0]);

  // GPU_TEST_DDP_CYCLES: which whole-job checkpoint-and-restore cycles each run makes (zstd first, always).
  const cycles = [{}, ...(process.env.GPU_TEST_DDP_CYCLES ?? '').split(',').filter(Boolean).map((c) => ({ raw: c.includes('raw'), cold: c.includes('cold'), shm: c.includes('shm') }))];
  /** Drops an image's files from the page cache (GNU dd, iflag=nocache): a restore that reads them from the disk. */
  const dropFromCache = (dir) => {
    for (const f of fs.readdirSync(dir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile()))
      spawnSync('dd', [`if=${path.join(f.parentPath ?? f.path, f.name)}`, 'iflag=nocache', 'count=0', 'status=none']);
  };

  /** GPU_TEST_DDP_PROBE=1: which GPUs hold each process's contexts (a rank's context on a GPU not its own is more for the driver to save). */
  const probeContexts = (when) => {
    if (process.env.GPU_TEST_DDP_PROBE === '1')
      say(spawnSync('nvidia-smi', ['--query-compute-apps=pid,gpu_bus_id,used_memory', '--format=csv,noheader'], { encoding: 'utf8' }).stdout?.replace(/^/gm, `# contexts ${when}: `) ?? '');
  };

  /** A shape's job (nproc ranks of gib GiB buffers each), started; its metrics go under prefix. */
  function startShape(prefix, nproc, gib) {
    const dir = fs.mkdtempSync(path.join(tmpRoot, `bench-${prefix}-`));
    const args = ['torchrun', '--standalone', `--nproc_per_node=${nproc}`, SCRIPT];
    const job = startJob(dir, 'bench', args, { ...ENV, DDP_OUT: dir, DDP_STEPS: '100000', DDP_STEP_SLEEP: '0.05', DDP_BUFFER_GIB: String(gib), ...appTraceEnv() });
    return { prefix, nproc, dir, job, n: () => lines(dir, 0).length };
  }

  /** Run i of a shape through each verb. */
  async function runShape({ prefix, nproc, dir, job, n }, i, add) {
    const g = await cliJson(['checkpoint', String(job), '--gpu-only', '-o', path.join(dir, 'G'), '--json'], 600_000);
    add(`${prefix}_gpu_only_pause_s`, g.pauseSeconds);
    add(`${prefix}_gpu_only_s`, g.seconds);
    fs.rmSync(path.join(dir, 'G'), { recursive: true, force: true });
    const members = [job, ...ranksOf(job)]; // while they hold GPU memory: how ranksOf knows them
    if (i === 0) probeContexts(`${prefix} after checkpoint --gpu-only`);
    const s = await cliJson(['suspend', String(job), '--json'], 600_000);
    add(`${prefix}_suspend_gpu_free_s`, s.gpuFreeSeconds);
    // Where each process's memory lies while suspended (the pool held in its own
    // memory: a checkpoint hands that off before CRIU dumps, so this is not CRIU's view).
    if (process.env.GPU_TEST_DDP_PROBE === '1' && i === 0)
      for (const pid of members) say(spawnSync(process.execPath, [path.join(ROOT, 'test/gpu/probes/smaps_top.mjs'), String(pid), '12'], { encoding: 'utf8' }).stdout.replace(/^/gm, `# ${prefix} smaps: `));
    const r = await cliJson(['resume', String(job), '--json'], 600_000);
    add(`${prefix}_resume_s`, r.seconds);
    await untilStep(dir, n() + 2, `${prefix}: after resume`, 120_000, nproc);
    let c, restoreSeconds;
    for (const cycle of cycles) {
      // A whole-job checkpoint and restore: zstd (the default) or CRIU's pages raw; restored from the page cache, or cold (the image's pages dropped from it first), or through /dev/shm, not huge pages.
      const tag = `${prefix}${cycle.raw ? '_raw' : ''}${cycle.cold ? '_cold' : ''}${cycle.shm ? '_shm' : ''}`;
      const C = path.join(dir, 'C');
      const name = `ddp-${tag}-${i + 1}`;
      const tree = [job, ...ranksOf(job)];
      const ck = await traced(h, ['checkpoint', String(job), '-o', C, '--json', ...(cycle.raw ? ['--raw-criu-pages'] : [])], `${name}-checkpoint`);
      keepCriuLog(path.join(C, 'criu', 'dump.log'), `${name}-dump`);
      // Gone and reaped (init here reaps orphans up to a second late): the restore is timed, not this host's init.
      await untilPidsFree(tree, `${tag}: after checkpoint`, 60_000);
      add(`${tag}_ckpt_s`, ck.seconds);
      add(`${tag}_image_bytes`, du(C));
      if (process.env.GPU_TEST_DDP_PROBE === '1' && i === 0) say(spawnSync(process.execPath, [path.join(ROOT, 'test/gpu/probes/criu_pages.mjs'), C, '16'], { encoding: 'utf8' }).stdout.replace(/^/gm, `# ${tag} probe: `));
      if (cycle.cold) dropFromCache(C);
      const t0 = performance.now();
      const rs = await traced(h, ['restore', C, '--detach', '--json'], `${name}-restore`, cycle.shm ? { GPUCKPT_HUGE_SCRATCH: '0' } : {});
      keepCriuLog(keptRestoreLog(`${name}-restore`), `${name}-restore`);
      add(`${tag}_restore_s`, (performance.now() - t0) / 1000);
      if (cycle.shm) add(`${tag}_restore_unpack_s`, rs.criuPages?.seconds ?? 0);
      fs.rmSync(C, { recursive: true, force: true });
      await untilStep(dir, n() + 2, `${tag}: after restore`, 120_000, nproc);
      if (cycle.raw || cycle.cold || cycle.shm) continue;
      c = ck;
      restoreSeconds = (performance.now() - t0) / 1000;
      add(`${prefix}_ckpt_gpu_free_s`, c.gpuFreeSeconds);
      add(`${prefix}_ckpt_dump_s`, c.dumpSeconds);
      add(`${prefix}_pool_bytes`, c.rawBytes);
      add(`${prefix}_ckpt_sync_s`, c.syncSeconds);
      add(`${prefix}_ckpt_pages_s`, c.criuPages?.seconds ?? 0);
      add(`${prefix}_ckpt_pages_stored_bytes`, c.criuPages?.storedBytes ?? 0);
      add(`${prefix}_restore_criu_s`, rs.criuSeconds);
      add(`${prefix}_restore_unpack_s`, rs.criuPages?.seconds ?? 0);
      for (const [k, v] of Object.entries(c.phases ?? {})) add(`${prefix}_ckpt_phase_${k}_s`, v);
      for (const [k, v] of Object.entries(rs.phases ?? {})) add(`${prefix}_restore_phase_${k}_s`, v);
      // The slowest member's suspend, step by step.
      for (const k of new Set((c.suspendPhases ?? []).flatMap(Object.keys))) add(`${prefix}_ckpt_suspend_${k}_s`, Math.max(...c.suspendPhases.map((p) => p[k] ?? 0)));
    }
    say(`# ${prefix} run ${i + 1}: gpu-only pause ${g.pauseSeconds} s, suspend ${s.gpuFreeSeconds} s, resume ${r.seconds} s, checkpoint ${c.seconds} s, restore ${restoreSeconds.toFixed(2)} s`);
  }

  /**
   * Every shape runs at once, and their runs take turns (job, rank, single,
   * job, ...): a host's drift (its page cache, fragmented memory, a first
   * run's cold start) falls on every shape alike, not on the one run first.
   * The shapes not being timed wait suspended, their GPUs and cores idle.
   */
  async function benchShapes(shapes, runs, add) {
    for (const sh of shapes) await untilStep(sh.dir, 3, `${sh.prefix}: start`, 180_000, sh.nproc);
    for (const sh of shapes) for (const r of ranksOf(sh.job)) started.add(r);
    if (process.env.GPU_TEST_DDP_PROBE === '1') for (const sh of shapes) say(`# ${sh.prefix}: launcher ${sh.job}, ranks ${ranksOf(sh.job).join(', ')}`);
    probeContexts('once started');
    const park = (sh) => cliJson(['suspend', String(sh.job), '--json'], 600_000);
    const unpark = async (sh) => {
      await cliJson(['resume', String(sh.job), '--json'], 600_000);
      await untilStep(sh.dir, sh.n() + 2, `${sh.prefix}: after its turn's resume`, 120_000, sh.nproc);
    };
    if (shapes.length > 1) for (const sh of shapes) await park(sh);
    for (let i = 0; i < runs; i++)
      for (const sh of shapes) {
        if (shapes.length > 1) await unpark(sh);
        if (i === 0) probeContexts(`${sh.prefix} resumed for its turn`);
        await runShape(sh, i, add);
        if (shapes.length > 1) await park(sh);
      }
    if (shapes.length > 1) for (const sh of shapes) await unpark(sh);
  }

  /** The anchor on the running job: the driver's lock and checkpoint of every rank (each bounded), then CRIU. */
  function anchorOn(job) {
    const ranks = ranksOf(job);
    const step = (pid, s) => {
      const r = spawnSync(path.join(BIN_DIR, 'driver_ckpt'), [String(pid), s], { encoding: 'utf8', timeout: 30_000 });
      return r.error?.code === 'ETIMEDOUT' || r.signal ? 'did not return in 30 s' : r.status !== 0 ? (r.stdout || r.stderr || '').trim().split('\n').at(-1) : 'ok';
    };
    const out = [];
    for (const s of ['lock', 'checkpoint']) {
      const got = ranks.map((pid) => step(pid, s));
      out.push(`${s}: ${got.join(' / ')}`);
      if (got.some((g) => g !== 'ok')) return out.join('; ');
    }
    const dir = fs.mkdtempSync(path.join(tmpRoot, 'anchor-'));
    const r = spawnSync('criu', ['dump', '-t', String(job), '-D', dir, '-o', 'dump.log', '--shell-job'], { encoding: 'utf8', timeout: 120_000 });
    const err = r.status === 0 ? 'ok' : (fs.readFileSync(path.join(dir, 'dump.log'), 'utf8').split('\n').find((l) => l.includes('Error (') && !l.includes('RLIMIT_NOFILE')) ?? `exit ${r.status}`).trim();
    out.push(`criu dump: ${err}`);
    return out.join('; ');
  }

  await test('distributed/bench', async () => {
    if (process.env.GPU_TEST_DDP_BENCH !== '1' && process.env.GPU_RUN_MODE !== 'bench') throw new Skip('a benchmark: GPU_TEST_DDP_BENCH=1 or npm run bench');
    const no = why();
    if (no) throw new Skip(no);
    const runs = Number(process.env.GPU_TEST_DDP_RUNS ?? 3);
    const gib = Number(process.env.GPU_TEST_DDP_GIB ?? 4);
    const m = {};
    const add = (k, v) => (m[k] ??= []).push(v);
    const shapes = (process.env.GPU_TEST_DDP_SHAPES ?? 'job,rank,single').split(',');
    let anchor = 'not tried';
    try {
      // One process of the job's total memory: its buffer takes the second rank's pool too.
      const sizes = { job: [2, gib], rank: [1, gib], single: [1, 2 * gib + 1] };
      const benched = shapes.map((name) => startShape(name, ...sizes[name]));
      try {
        await benchShapes(benched, runs, add);
      } finally {
        for (const sh of benched) keepAppLog(path.join(sh.dir, 'bench.log'), `ddp-${sh.prefix}`);
      }
      const job = benched.find((sh) => sh.prefix === 'job');
      if (job) {
        anchor = anchorOn(job.job);
        say(`# anchor on the 2-rank job: ${anchor}`);
      }
    } finally {
      endAll();
    }
    const metrics = Object.fromEntries(Object.entries(m).map(([k, v]) => [k, { median: median(v), all: v }]));
    const gpus = gpuInfo();
    const out = process.env.BENCH_OUT ?? process.env.OUT ?? path.join(ROOT, 'docs', 'bench');
    fs.mkdirSync(out, { recursive: true });
    const result = {
      gpu: gpus[0]?.name ?? 'unknown',
      gpus: gpus.length,
      driver: gpus[0]?.driver ?? 'unknown',
      cpus: (await import('node:os')).cpus().length,
      hostMemGiB: Math.round((await import('node:os')).totalmem() / 2 ** 30),
      date: new Date().toISOString().slice(0, 10),
      command: `GPU_TEST_DDP_BENCH=1 GPU_TEST_DDP_RUNS=${runs} GPU_TEST_DDP_GIB=${gib} GPU_TEST_DDP_SHAPES=${shapes.join(',')}${cycles.length > 1 ? ` GPU_TEST_DDP_CYCLES=${process.env.GPU_TEST_DDP_CYCLES}` : ''} GPU_TEST_ONLY=distributed/bench npm run test:gpu`,
      workload: `PyTorch DDP, 2 ranks (torchrun), ${gib} GiB buffer per rank, beside one rank alone${shapes.includes('single') ? ` and one process of ${2 * gib + 1} GiB` : ''}`,
      runs,
      anchor,
      metrics,
    };
    fs.writeFileSync(path.join(out, 'ddp.json'), JSON.stringify(result, null, 1));
    const g = (k) => metrics[k]?.median ?? NaN;
    measure('distributed/bench', Object.fromEntries(Object.entries(metrics).map(([k, v]) => [k, v.median])));
    // Only the shapes that ran (GPU_TEST_DDP_SHAPES).
    const label = { job: '2-rank job', rank: 'one rank alone', single: 'one process of the same memory' };
    const line = (verb) => shapes.filter((s) => metrics[`${s}_${verb}_s`]).map((s) => `${label[s]} ${g(`${s}_${verb}_s`).toFixed(2)} s`).join(', ');
    return `checkpoint: ${line('ckpt')}; restore: ${line('restore')}; anchor: ${anchor}`;
  });
}
