/**
 * `npm run bench`: gpuckpt against the anchor (the driver's checkpoint API
 * + CRIU, what NVIDIA's cuda-checkpoint does) on the same processes, in one
 * run. Workloads: pool_fill pools of BENCH_POOLS GiB (realistic mixed
 * content: incompressible bytes, zeros, low-entropy floats) and a PyTorch
 * training job (torch_train.py at 100M parameters, an 8 GiB buffer). Each
 * is run BENCH_RUNS times on one process; every figure is the median, and
 * the data is verified after each step.
 *
 * Each workload's result goes to BENCH_OUT/<workload>.json (default: $OUT,
 * else docs/bench/); bench-report.mjs turns them into docs/BENCHMARKS.md.
 * Timings are reported, never judged: thresholds live in the report.
 *
 * Environment: BENCH_POOLS (default "1,16,64"; sizes that do not fit the
 * GPU, host memory or disk are skipped with the reason), BENCH_RUNS
 * (default 3), BENCH_TORCH (default 1), BENCH_SHIM (default 1: the shim's
 * own cost, cudaMalloc+cudaFree and kernel launches against native;
 * BENCH_LAUNCH_ROUNDS, default 40, rounds of three short processes for
 * the launch rate between processes; BENCH_CPU, the CPU the measuring
 * thread runs on, default the second to last),
 * BENCH_INCREMENTAL (default "16": pool sizes in GiB for incremental
 * images, 10 % changed; "0": none), BENCH_LIVE (default "16": pool sizes
 * in GiB for checkpoint --live under a job rewriting BENCH_LIVE_MIBPS,
 * default 1024, MiB/s; "0": none), BENCH_HELD (default "16": pool sizes in
 * GiB for snapshots held in GPU memory and rolled back, beside the host
 * route; "0": none), BENCH_BAR (default 1: reads and writes through the
 * BAR mapping peek and poke use, against the DMA copies of checkpoints and
 * restores, 4 KiB to 1 GiB; needs the Vulkan loader), BENCH_IMAGE_ONLY
 * (1: the pools and the PyTorch job are measured on whole-process images
 * and the anchor's only), BENCH_TRACE (1: those commands' debug traces in
 * $OUT/trace-*.log), BENCH_ANCHOR (0: the anchor left out, to compare
 * variants of gpuckpt itself; its figures then come from another run).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { syncTree } from '../../dist/controller/image/durable.js';
import { heldRounds } from './gpu-held.mjs';
import { appTraceEnv, keepAppLog, keepCriuLog, keptRestoreLog, traced } from './traces.mjs';

const GiB = 2 ** 30;
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
/** Each metric's runs, and their median. */
const medians = (m) => Object.fromEntries(Object.entries(m).map(([k, v]) => [k, { median: median(v), all: v }]));

/**
 * One pool_fill process of gib GiB: body(p, pid, add, ready) measures on it, add(k, v)
 * recording a run of metric k; the process quits afterwards. Returns the medians.
 */
async function onPoolFill(h, gib, body) {
  const p = h.launchViaFifo('pool_fill', [String(gib)]);
  const m = {};
  try {
    const ready = await p.nextLine('ready', 600_000);
    await body(p, String(ready.pid), (k, v) => (m[k] ??= []).push(v), ready);
    p.send('quit', 'bye').catch(() => undefined);
  } finally {
    p.close();
  }
  return medians(m);
}

/** h: the runner's harness (run.mjs): test, Skip, failure, cliJson, launchViaFifo, ... */
export async function runBench(h) {
  const env = process.env;
  if (env.BENCH_TORCH !== '0') {
    // The benchmark's job; torch_train.py's own defaults are the tests' smaller
    // one (a bench run without these measured that, labelled as this).
    env.TORCH_PARAMS_M ??= '100';
    env.TORCH_BUFFER_GIB ??= '8';
  }
  const runs = Math.max(1, Number(env.BENCH_RUNS ?? 3));
  const outDir = env.BENCH_OUT ?? env.OUT ?? path.join(h.ROOT, 'docs', 'bench');
  fs.mkdirSync(outDir, { recursive: true });
  const gpus = h.gpuInfo();
  const host = {
    gpu: gpus[0]?.name ?? 'unknown',
    gpus: gpus.length,
    driver: gpus[0]?.driver ?? 'unknown',
    cpus: os.cpus().length,
    hostMemGiB: Math.round(os.totalmem() / GiB),
    date: new Date().toISOString().slice(0, 10),
    // Every setting that chose what ran, so the line reruns it.
    command: `${Object.keys(env)
      .filter((k) => /^(BENCH_|TORCH_)/.test(k) && !['BENCH_OUT', 'BENCH_POOLS', 'BENCH_RUNS'].includes(k))
      .sort()
      .map((k) => `${k}=${env[k]} `)
      .join('')}BENCH_POOLS=${env.BENCH_POOLS ?? '1,16,64'} BENCH_RUNS=${runs} npm run bench`,
  };
  const save = (name, workload, metrics) => {
    const file = path.join(outDir, `${name}.json`);
    fs.writeFileSync(file, JSON.stringify({ ...host, workload, runs, metrics }, null, 1));
    h.say(`# bench ${name}: ${file}`);
  };

  if (env.BENCH_SHIM !== '0') {
    await h.test('bench/shim', async () => {
      const metrics = await benchShim(h, runs);
      save('shim', 'what the shim adds: bench_alloc, plain and under gpuckpt run, alternately', metrics);
      const g = (k) => metrics[k].median;
      return `cudaMalloc+cudaFree x${(g('malloc_free_ns_plain') / g('malloc_free_ns_shim')).toFixed(1)} faster under the shim; launch rate ${(100 * g('launch_rate_ratio')).toFixed(1)} % of native (${(100 * g('launch_rate_ratio_in_process')).toFixed(2)} % in one process, ${(100 * g('launch_rate_ratio_in_process_plain')).toFixed(2)} % with no shim); +${g('shim_ns_per_driver_call').toFixed(1)} ns per driver call, ${g('driver_calls_per_launch').toFixed(2)} calls per launch`;
    });
  }

  for (const gib of (env.BENCH_POOLS ?? '1,16,64').split(',').map(Number).filter((g) => g > 0)) {
    const name = `pool-${gib}g`;
    await h.test(`bench/${name}`, async () => {
      const why = poolDoesNotFit(h, gib, gpus);
      if (why) throw new h.Skip(why);
      const metrics = await benchWorkload(h, runs, {
        name,
        launch: () => h.launchViaFifo('pool_fill', [String(gib)]),
        readyMs: 600_000,
        verify: async (p, ready, what) => h.expectSame((await p.send('state', 'state')).buffers, ready.buffers, what),
        gpuOnly: true,
      });
      save(name, `pool_fill ${gib} GiB (mixed content)`, metrics);
      return summarize(metrics);
    });
  }

  for (const gib of (env.BENCH_INCREMENTAL ?? '16').split(',').map(Number).filter((g) => g > 0)) {
    const name = `incremental-${gib}g`;
    await h.test(`bench/${name}`, async () => {
      const why = poolDoesNotFit(h, gib, gpus);
      if (why) throw new h.Skip(why);
      const metrics = await benchIncremental(h, runs, gib);
      save(name, `pool_fill ${gib} GiB: full checkpoint, then 10 % of every buffer rewritten and checkpoint --parent`, metrics);
      const g = (k) => metrics[k].median;
      return (
        `incremental ${g('inc_seconds')} s / ${(g('inc_stored_bytes') / 1e9).toFixed(2)} GB vs full ${g('full_seconds')} s / ${(g('full_stored_bytes') / 1e9).toFixed(2)} GB ` +
        `(${(100 * g('time_ratio')).toFixed(1)} % of the time, ${(100 * g('size_ratio')).toFixed(1)} % of the size); digests ${g('digest_seconds')} s; restore through the chain ${g('chain_restore_seconds')} s`
      );
    });
  }

  for (const gib of (env.BENCH_HELD ?? '16').split(',').map(Number).filter((g) => g > 0)) {
    const name = `held-${gib}g`;
    await h.test(`bench/${name}`, async () => {
      const why = poolDoesNotFit(h, gib, gpus);
      if (why) throw new h.Skip(why);
      const metrics = await onPoolFill(h, gib, async (p, pid, add, ready) => heldRounds(h, p, pid, ready.buffers, runs, add));
      save(name, `pool_fill ${gib} GiB: snapshots in GPU memory (checkpoint --gpu-only --to-gpu, restore gpu:ID --into) beside the host route, alternately`, metrics);
      const ms = (k) => (metrics[k] ? `${(1000 * metrics[k].median).toFixed(1)} ms` : '-');
      return `snapshot paused ${ms('snap_pause_seconds')}, rollback ${ms('roll_pause_seconds')}; host route ${ms('host_pause_seconds')} and ${ms('host_roll_pause_seconds')}; onto GPU 1 ${ms('other_snap_pause_seconds')}, back ${ms('other_roll_pause_seconds')}`;
    });
  }

  if (env.BENCH_BAR !== '0') {
    await h.test('bench/bar', async () => {
      const metrics = await benchBar(h, runs);
      save('bar', 'pool_fill 2 GiB: reads and writes of one allocation through the BAR (peek, poke) and by DMA (checkpoint, restore --into)', metrics);
      const us = (k) => `${(1e6 * metrics[k].median).toFixed(1)} µs`;
      return `4 KiB: BAR read ${us('bar_read_s_4096')} vs DMA ${us('dma_read_s_4096')}, write ${us('bar_write_s_4096')} vs ${us('dma_write_s_4096')}; 1 GiB: read ${metrics['bar_read_s_1073741824'].median.toFixed(3)} s vs ${metrics['dma_read_s_1073741824'].median.toFixed(3)} s`;
    });
  }

  const liveMibps = Number(env.BENCH_LIVE_MIBPS ?? 1024);
  for (const gib of (env.BENCH_LIVE ?? '16').split(',').map(Number).filter((g) => g > 0)) {
    const name = `live-${gib}g`;
    await h.test(`bench/${name}`, async () => {
      const why = poolDoesNotFit(h, gib, gpus);
      if (why) throw new h.Skip(why);
      const metrics = await benchLive(h, runs, gib, liveMibps);
      save(name, `pool_fill ${gib} GiB rewritten at ${liveMibps} MiB/s: checkpoint --gpu-only, plain and --live, alternately`, metrics);
      const g = (k) => metrics[k].median;
      return (
        `pause --live ${(1000 * g('live_pause_seconds')).toFixed(1)} ms (${g('live_rounds')} rounds, ${(g('live_pause_bytes') / 2 ** 20).toFixed(1)} MiB in the pause) vs plain ${(1000 * g('plain_pause_seconds')).toFixed(1)} ms; ` +
        `durable ${g('live_seconds')} s vs ${g('plain_seconds')} s; the restored image was the pool after write ${g('held_write')} of the rewriter, whole`
      );
    });
  }

  if (env.BENCH_TORCH !== '0') {
    // Another job than the default one is a workload of its own (issue 26's: 166M parameters, 2 GiB).
    const name = env.TORCH_PARAMS_M === '100' && env.TORCH_BUFFER_GIB === '8' ? 'torch' : `torch-${env.TORCH_PARAMS_M}m-${env.TORCH_BUFFER_GIB}g`;
    await h.test(`bench/${name}`, async () => {
      const { py, script } = h.pythonJob('torch');
      const steps = Number(env.GPU_TEST_TORCH_STEPS ?? 6);
      const metrics = await benchWorkload(h, runs, {
        name,
        launch: () => h.launchViaFifo(py, [script]),
        readyMs: 300_000,
        // Deterministic training: a restored job must take the next steps.
        verify: async (p, _ready, what) => {
          const t = await p.send(`train ${steps}`, 'trained', 300_000);
          // Losses come as exact hex floats ("0x1.c6bafp+2"); a NaN would read "nan".
          if (!t.losses?.length || t.losses.some((l) => !Number.isFinite(typeof l === 'number' ? l : Number.parseFloat(String(l).replace(/^-?0x.*/, '1')))))
            throw h.failure(`${what}: training gave ${JSON.stringify(t.losses)}`);
        },
        gpuOnly: false,
      });
      save(name, `PyTorch training job (${env.TORCH_PARAMS_M}M parameters, AdamW, ${env.TORCH_BUFFER_GIB} GiB buffer)`, metrics);
      return summarize(metrics);
    });
  }
}

/**
 * bench_alloc plain and under the shim, alternately, `runs` times each (each
 * run is itself the median of 5 repetitions), the measuring thread pinned to
 * the same CPU in both (BENCH_CPU, default the second to last). Then, once,
 * how many driver calls one kernel launch makes through the shim: with the
 * shim's cost of one call, what it adds to a launch.
 */
async function benchShim(h, runs) {
  const m = {};
  const add = (k, v) => (m[k] ??= []).push(v);
  const cpu = process.env.BENCH_CPU ?? String(Math.max(0, os.availableParallelism() - 2));
  const one = (shim) => benchAlloc(h, [], { shim, extraEnv: { BENCH_CPU: cpu } });
  for (let i = 0; i < runs; i++) {
    const plain = await one(false);
    const shim = await one(true);
    add('malloc_free_ns_plain', plain.mallocFreeNs);
    add('malloc_free_ns_shim', shim.mallocFreeNs);
    add('launches_per_s_plain', plain.launchesPerSec);
    add('launches_per_s_shim', shim.launchesPerSec);
    add('launch_rate_ratio', shim.launchesPerSec / plain.launchesPerSec);
    if (plain.launchWrapped || !shim.launchWrapped)
      throw h.failure(`bench_alloc: cuLaunchKernel ${shim.launchWrapped ? 'wrapped without the shim' : 'not wrapped under the shim'}`);
    add('launch_rate_ratio_in_process', shim.launchRatioInProcess);
    add('launch_rate_ratio_in_process_plain', plain.launchRatioInProcess);
    add('driver_call_ns_plain', plain.driverCallNs);
    add('driver_call_ns_shim', shim.driverCallNs);
    add('shim_ns_per_driver_call', shim.driverCallNs - plain.driverCallNs);
  }
  const rounds = await launchRateRounds(h, cpu, Math.max(0, Number(process.env.BENCH_LAUNCH_ROUNDS ?? 40)));
  const result = { ...medians(m), ...rounds };
  const perLaunch = await driverCallsPerLaunch(h, 100_000);
  // What the shim's calls add to a launch, against native's time per launch.
  const costFraction = (result.shim_ns_per_driver_call.median * perLaunch) / (1e9 / result.launches_per_s_plain.median);
  return {
    ...result,
    bench_cpu: { median: Number(cpu), all: [Number(cpu)] },
    driver_calls_per_launch: { median: perLaunch, all: [perLaunch] },
    shim_launch_cost_fraction: { median: costFraction, all: [costFraction] },
  };
}

/**
 * Launch rates between processes need many processes: native's own rate
 * spreads by some 20 % from one process to the next. `rounds` rounds of
 * three short processes, in rotating order: plain, under the shim, and
 * under the shim switched off (GPUCKPT_DISABLE=1: wrappers and gate only, no
 * pool), which tells a cost of the pool's from one of merely being there.
 * Per round, each one's rate over the plain one's; also their mean and its
 * standard error, as the medians of skewed ratios mislead.
 */
async function launchRateRounds(h, cpu, rounds) {
  if (!rounds) return {};
  const arms = [
    ['plain', { shim: false }],
    ['shim', { shim: true }],
    ['shim_off', { shim: true, extraEnv: { GPUCKPT_DISABLE: '1' } }],
  ];
  const m = {};
  for (let r = 0; r < rounds; r++) {
    const rate = {};
    for (let i = 0; i < arms.length; i++) {
      const [name, opts] = arms[(r + i) % arms.length];
      rate[name] = (await benchAlloc(h, ['rate', '200000'], { ...opts, extraEnv: { BENCH_CPU: cpu, ...opts.extraEnv } }, 120_000)).launchesPerSec;
    }
    (m.rounds_launch_ratio_shim ??= []).push(rate.shim / rate.plain);
    (m.rounds_launch_ratio_shim_off ??= []).push(rate.shim_off / rate.plain);
  }
  const meanAndError = (xs) => {
    const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
    const sd = Math.sqrt(xs.reduce((a, b) => a + (b - mean) ** 2, 0) / Math.max(1, xs.length - 1));
    return { mean, stderr: sd / Math.sqrt(xs.length) };
  };
  const out = medians(m);
  for (const k of Object.keys(m)) {
    const { mean, stderr } = meanAndError(m[k]);
    out[`${k}_mean`] = { median: mean, all: [mean] };
    out[`${k}_stderr`] = { median: stderr, all: [stderr] };
  }
  return out;
}

/** One bench_alloc process, run to its one bench line and its exit. */
async function benchAlloc(h, args, opts, ms = 180_000) {
  const app = new h.App('bench/shim', 'bench_alloc', args, opts);
  const r = await app.next('bench', ms);
  if (r.event !== 'bench') throw app.error(`bench_alloc ${args.join(' ')}: ${JSON.stringify(r).slice(0, 200)}`);
  await app.waitExit(30_000);
  return r;
}

/** Driver calls through the gate per empty-kernel launch (gpuckpt ps's count, before and after n launches). */
async function driverCallsPerLaunch(h, n) {
  const app = new h.App('bench/shim', 'bench_alloc', ['count', String(n)]);
  const calls = async (pid) => {
    const row = (await h.cliJson(['ps', '--json'], 30_000)).find((r) => r.pid === pid);
    if (!row) throw app.error(`gpuckpt ps does not list bench_alloc (pid ${pid})`);
    return row.driverCalls;
  };
  const warm = await app.next('warm', 120_000);
  if (warm.event !== 'warm') throw app.error(`bench_alloc count: ${JSON.stringify(warm).slice(0, 200)}`);
  const before = await calls(warm.pid);
  await app.send('go', 'launched', 120_000);
  const after = await calls(warm.pid);
  app.child.stdin.write('done\n');
  await app.waitExit(30_000);
  return (after - before) / n;
}

/**
 * Incremental images on one pool_fill process, `runs` rounds of: a full
 * gpu-only checkpoint, `touch 10` (the first 10 % of every buffer
 * rewritten), checkpoint --parent of the full one; then a rollback through
 * the chain, verified. Images are removed after each round (disk).
 */
async function benchIncremental(h, runs, gib) {
  return onPoolFill(h, gib, async (p, pid, add) => {
    for (let i = 0; i < runs; i++) {
      const full = path.join(h.tmpRoot, `inc-full-${i}`);
      const inc = path.join(h.tmpRoot, `inc-${i}`);
      const f = await h.cliJson(['checkpoint', pid, '--gpu-only', '-o', full, '--json'], 600_000);
      const touched = (await p.send('touch 10', 'touched', 120_000)).buffers;
      const c = await h.cliJson(['checkpoint', pid, '--gpu-only', '-o', inc, '--parent', full, '--json'], 600_000);
      add('full_seconds', f.seconds);
      add('full_pause_seconds', f.pauseSeconds);
      add('full_stored_bytes', f.storedBytes);
      add('inc_seconds', c.seconds);
      add('inc_pause_seconds', c.pauseSeconds);
      add('inc_raw_bytes', c.rawBytes);
      add('inc_stored_bytes', c.storedBytes);
      add('digest_seconds', c.digestSeconds);
      add('time_ratio', c.seconds / f.seconds);
      add('size_ratio', c.storedBytes / f.storedBytes);
      for (const [w, x] of [['full', f], ['inc', c]]) {
        // Where the time went: the phases, then setup, the pause and commit by step.
        for (const [k, v] of Object.entries(x.phases ?? {})) add(`${w}.${k}_s`, v);
        for (const part of ['setup', 'pause', 'commit']) for (const [k, v] of Object.entries(x[`${part}Phases`] ?? {})) add(`${w}.${part}.${k}_s`, v);
        // When the bytes went to the file: from the first frame's write on, the disk's pace bounds the image.
        if (x.writes?.firstSeconds === undefined) continue;
        add(`${w}_first_write_seconds`, x.writes.firstSeconds);
        add(`${w}_stored_at_pause_end_bytes`, x.writes.atPauseEndBytes);
        add(`${w}_write_GBps`, x.storedBytes / 1e9 / (x.seconds - x.writes.firstSeconds));
      }
      if (i === runs - 1) {
        await p.send('mutate', 'mutated', 120_000);
        const r = await h.cliJson(['restore', inc, '--into', pid, '--json'], 600_000);
        h.expectSame((await p.send('state', 'state')).buffers, touched, 'state after restoring the incremental image');
        add('chain_restore_seconds', r.seconds);
      }
      fs.rmSync(inc, { recursive: true, force: true });
      fs.rmSync(full, { recursive: true, force: true });
    }
  });
}

/** Sizes the BAR is measured at, and how many times each (a 1 GiB read through the BAR takes about 2 s). */
const BAR_SIZES = [4096, 65536, 1 << 20, 16 << 20, 256 << 20, 1 << 30];
/** Pieces of a scattered write (an image's blocks are 256 KiB, DIGEST_BLOCK). */
const SCATTERED_PIECES = 64;
const SCATTERED_SIZES = [4096, 256 << 10];
const barReps = (size, runs) => (size <= 1 << 20 ? 20 * runs : size <= 16 << 20 ? 3 * runs : runs);

/**
 * One allocation of pool_fill (1 GiB of a 2 GiB pool) read and written at
 * each size through the BAR mapping peek and poke use (the addon's barRead
 * and barWrite, timed here) and by the DMA the checkpoint and restore use
 * (COPY_OUT and COPY_IN into staging, the paused application; the shim's
 * own copy time); then 64 pieces spread over it, one call each through the
 * BAR against one batch by DMA. Writes put back the bytes just read, so the
 * data checks.
 */
async function benchBar(h, runs) {
  const { ShimSession } = await import('../../dist/controller/adapters/session.js');
  const { native } = await import('../../dist/native/index.js');
  return onPoolFill(h, 2, async (p, pid, add, ready) => {
    const session = await ShimSession.open(Number(pid));
    try {
      const alloc = (await session.listAllocations()).reduce((a, b) => (b.size > a.size ? b : a));
      const span = Math.min(Number(alloc.size), 1 << 30);
      const { first, device, fds } = await session.chunkExport(alloc.addr, span);
      const uuid = (await session.devices())[device].uuid;
      const mapped = native().barMap(fds, Number(session.hello.chunkSize), uuid);
      for (const fd of fds) native().closeFd(fd);
      if ('tried' in mapped) throw new h.Skip(`no route maps GPU memory here: ${mapped.tried.join('; ')}`);
      const offset = Number(alloc.addr - first);
      const staging = await session.mapStaging(span, 'shared');
      try {
        for (const size of BAR_SIZES.filter((s) => s <= span)) {
          const range = [{ device, addr: alloc.addr, length: size, stagingOffset: 0 }];
          for (let i = 0; i < barReps(size, runs); i++) {
            let t = process.hrtime.bigint();
            const bytes = native().barRead(mapped.id, offset, size);
            add(`bar_read_s_${size}`, Number(process.hrtime.bigint() - t) / 1e9);
            t = process.hrtime.bigint();
            native().barWrite(mapped.id, offset, bytes);
            add(`bar_write_s_${size}`, Number(process.hrtime.bigint() - t) / 1e9);
            // A DMA read from outside the process pauses it (peek does not): the pause timed whole too.
            t = process.hrtime.bigint();
            await session.quiesce(60_000);
            add(`dma_read_s_${size}`, (await session.copyOut(range)).ns / 1e9);
            await session.resume();
            add(`dma_paused_read_s_${size}`, Number(process.hrtime.bigint() - t) / 1e9);
            await session.quiesce(60_000, true);
            add(`dma_write_s_${size}`, (await session.copyIn(range, true)).ns / 1e9);
            await session.resume();
          }
        }
        // Scattered pieces, as an incremental image or a rollback of a few
        // blocks would write them: the BAR a call per piece, DMA one batch.
        for (const size of SCATTERED_SIZES) {
          const stride = Math.floor(span / SCATTERED_PIECES / size) * size;
          const pieces = Array.from({ length: SCATTERED_PIECES }, (_, i) => i * stride);
          const ranges = pieces.map((at, i) => ({ device, addr: alloc.addr + BigInt(at), length: size, stagingOffset: i * size }));
          for (let i = 0; i < 10 * runs; i++) {
            let t = process.hrtime.bigint();
            const bytes = pieces.map((at) => native().barRead(mapped.id, offset + at, size));
            add(`scattered_bar_read_s_${size}`, Number(process.hrtime.bigint() - t) / 1e9);
            t = process.hrtime.bigint();
            pieces.forEach((at, k) => native().barWrite(mapped.id, offset + at, bytes[k]));
            add(`scattered_bar_write_s_${size}`, Number(process.hrtime.bigint() - t) / 1e9);
            await session.quiesce(60_000);
            add(`scattered_dma_read_s_${size}`, (await session.copyOut(ranges)).ns / 1e9);
            await session.resume();
            await session.quiesce(60_000, true);
            add(`scattered_dma_write_s_${size}`, (await session.copyIn(ranges, true)).ns / 1e9);
            await session.resume();
          }
        }
      } finally {
        native().barUnmap(mapped.id);
        await session.unmapStaging().catch(() => undefined);
      }
      h.expectSame((await p.send('state', 'state')).buffers, ready.buffers, 'state after the reads and writes');
      add('route_vulkan', mapped.route === 'vulkan' ? 1 : 0);
    } finally {
      session.close();
    }
  });
}

/**
 * One pool_fill process whose pool a thread rewrites at mibps MiB/s (the
 * job of the --live target), `runs` rounds of a plain and a --live gpu-only
 * checkpoint; then the last --live image restored --into and checked: every
 * region one write, whole, and together the state after some number of
 * writes.
 */
async function benchLive(h, runs, gib, mibps) {
  return onPoolFill(h, gib, async (p, pid, add) => {
    const regions = (await p.send(`rewrite ${mibps}`, 'rewriting', 120_000)).regions;
    let last;
    for (let i = 0; i < runs; i++) {
      const plain = path.join(h.tmpRoot, `live-plain-${i}`);
      last = path.join(h.tmpRoot, `live-${i}`);
      const a = await h.cliJson(['checkpoint', pid, '--gpu-only', '-o', plain, '--json'], 600_000);
      fs.rmSync(plain, { recursive: true, force: true });
      const b = await h.cliJson(['checkpoint', pid, '--gpu-only', '--live', '-o', last, '--json'], 600_000);
      add('plain_pause_seconds', a.pauseSeconds);
      add('plain_seconds', a.seconds);
      add('live_pause_seconds', b.pauseSeconds);
      add('live_seconds', b.seconds);
      add('live_rounds', b.live.rounds.length);
      add('live_precopy_seconds', b.live.precopySeconds);
      add('live_precopied_bytes', b.live.rounds.reduce((s, r) => s + r.bytes, 0));
      add('live_pause_bytes', b.live.pauseBytes);
      add('live_digest_seconds', b.digestSeconds);
      add('pause_ratio', b.pauseSeconds / a.pauseSeconds);
      for (const [k, v] of Object.entries(b.phases ?? {})) add(`live.${k}_s`, v);
      if (i < runs - 1) fs.rmSync(last, { recursive: true, force: true });
    }
    const stopped = await p.send('rewritten', 'rewritten', 120_000);
    await p.send('mutate', 'mutated', 120_000);
    await h.cliJson(['restore', last, '--into', pid, '--json'], 600_000);
    const back = await p.send('rewritten', 'rewritten', 120_000);
    if (!back.whole || !back.prefix || back.holds > stopped.count) throw h.failure(`the restored --live image is not the pool at one moment: ${JSON.stringify(back)}`);
    add('held_write', back.holds - regions);
    fs.rmSync(last, { recursive: true, force: true });
  });
}

/** A reason the pool cannot be measured here, or undefined. */
function poolDoesNotFit(h, gib, gpus) {
  const freeGiB = (gpus[0]?.freeMiB ?? 0) / 1024;
  if (gib > freeGiB * 0.9) return `${gib} GiB pool does not fit the ${freeGiB.toFixed(0)} GiB free on GPU 0`;
  // Held in host memory by suspend, and dumped whole by the anchor.
  if (gib * 1.5 > os.freemem() / GiB) return `${gib} GiB pool needs ${(gib * 1.5).toFixed(0)} GiB of host memory, ${(os.freemem() / GiB).toFixed(0)} GiB free`;
  const st = fs.statfsSync(h.tmpRoot);
  const disk = (st.bavail * st.bsize) / GiB;
  if (gib * 1.7 > disk) return `${gib} GiB pool needs ${(gib * 1.7).toFixed(0)} GiB of disk for its images, ${disk.toFixed(0)} GiB free`;
  return undefined;
}

/**
 * One process, `runs` rounds of: [gpu-only checkpoint + restore --into],
 * suspend + resume, migrate to GPU 1 and back (2 GPUs), checkpoint
 * --leave-running beside the anchor's (none of these with
 * BENCH_IMAGE_ONLY=1), whole-process checkpoint + restore, and the
 * anchor's whole-process checkpoint + restore. Images are removed after
 * each round (disk). w.name names the traces.
 */
async function benchWorkload(h, runs, w) {
  // BENCH_TRACE=1: the application's shim traces too, kept beside the commands'.
  const appEnv = appTraceEnv();
  Object.assign(process.env, appEnv);
  const p = w.launch();
  for (const k of Object.keys(appEnv)) delete process.env[k];
  const m = {};
  const add = (k, v) => (m[k] ??= []).push(v);
  const du = (d) => Number((spawnSync('du', ['-sb', d], { encoding: 'utf8' }).stdout || '0').split('\t')[0]);
  const gone = async (pid) => {
    for (let i = 0; i < 1200 && p.alive(pid); i++) await h.sleep(50);
    if (p.alive(pid)) throw h.failure(`process ${pid} still runs after its checkpoint`);
  };
  const driver = (pid, s) => {
    const t = performance.now();
    const r = spawnSync(path.join(h.BIN_DIR, 'driver_ckpt'), [String(pid), s], { encoding: 'utf8', timeout: 600_000 });
    if (r.status !== 0) throw h.failure(`driver ${s} of ${pid}: ${(r.stdout || r.stderr || '').trim()}`);
    return (performance.now() - t) / 1000;
  };
  const criu = (args) => {
    const t = performance.now();
    const r = spawnSync('criu', args, { encoding: 'utf8', timeout: 600_000 });
    if (r.status !== 0) throw h.failure(`criu ${args[0]} failed (${h.describeExit({ code: r.status, signal: r.signal })})`);
    return (performance.now() - t) / 1000;
  };
  const twoGpus = h.gpuUuids().length >= 2;
  const imageOnly = process.env.BENCH_IMAGE_ONLY === '1';
  try {
    const ready = await p.nextLine('ready', w.readyMs);
    const pid = ready.pid;
    // The other verbs' checks ran the job a while before its first image; alone, it runs a while first too.
    if (imageOnly) await w.verify(p, ready, 'before round 1');
    for (let i = 1; i <= runs; i++) {
      const round = `round ${i}`;
      // BENCH_IMAGE_ONLY=1: whole-process images and the anchor's only.
      if (!imageOnly) {
        if (w.gpuOnly) {
          const snap = path.join(p.dir, `gpu-${i}`);
          const ck = await h.cliJson(['checkpoint', String(pid), '--gpu-only', '-o', snap, '--json'], 600_000);
          add('gpu_only_pause_s', ck.pauseSeconds);
          add('gpu_only_durable_s', ck.seconds);
          add('gpu_only_image_bytes', du(snap));
          add('raw_bytes', ck.rawBytes);
          add('zero_bytes', ck.zeroBytes);
          const rs = await h.cliJson(['restore', snap, '--into', String(pid), '--json'], 600_000);
          add('restore_into_s', rs.seconds);
          add('restore_into_pause_s', rs.pauseSeconds);
          await w.verify(p, ready, `${round}: after restore --into`);
          fs.rmSync(snap, { recursive: true, force: true });
        }

        // The process's first suspend of the round: its host memory fresh
        // from the kernel (a whole-process checkpoint, in the round before,
        // dropped what an earlier suspend kept).
        const sus = await h.cliJson(['suspend', String(pid), '--json'], 600_000);
        if (Object.keys(h.gpuMemoryOf(pid)).length) throw h.failure(`${round}: the suspended process still holds GPU memory`);
        if (!sus.driverKept) throw h.failure(`${round}: suspend left no driver keeper`);
        const r0 = performance.now();
        const res = await h.cliJson(['resume', String(pid), '--json'], 600_000);
        add('resume_command_s', (performance.now() - r0) / 1000);
        await w.verify(p, ready, `${round}: after suspend + resume`);
        add('suspend_gpu_free_s', sus.gpuFreeSeconds);
        add('suspend_zero_bytes', sus.zeroBytes);
        add('resume_s', res.seconds);
        for (const [k, v] of Object.entries(sus.phases ?? {})) add(`suspend.${k}_s`, v);
        for (const [k, v] of Object.entries(res.phases ?? {})) add(`resume.${k}_s`, v);
        // Again, into the host memory the first one kept (spare_memory.h).
        const again = await h.cliJson(['suspend', String(pid), '--json'], 600_000);
        await h.cliJson(['resume', String(pid), '--json'], 600_000);
        await w.verify(p, ready, `${round}: after a second suspend + resume`);
        add('suspend_again_gpu_free_s', again.gpuFreeSeconds);
        for (const [k, v] of Object.entries(again.phases ?? {})) add(`suspend_again.${k}_s`, v);
        // The resume without a driver keeper (native/keeper/driver_keeper.c), for comparison.
        await h.cliJson(['suspend', String(pid), '--no-keep-driver', '--json'], 600_000);
        const c0 = performance.now();
        const cold = await h.cliJson(['resume', String(pid), '--json'], 600_000);
        add('resume_command_no_keeper_s', (performance.now() - c0) / 1000);
        add('resume_no_keeper_s', cold.seconds);
        await w.verify(p, ready, `${round}: after suspend + resume without a driver keeper`);
        for (const [k, v] of Object.entries(cold.phases ?? {})) add(`resume_no_keeper.${k}_s`, v);
        if (twoGpus) {
          // GPU to GPU (NVLink), then the same trip through host memory for comparison.
          const there = await h.cliJson(['migrate', String(pid), '--to-device', '1', '--json'], 600_000);
          await w.verify(p, ready, `${round}: after migrate to GPU 1`);
          if (there.route !== 'gpu' && h.nvlinked(0, 1)) throw h.failure(`${round}: migrate went through host memory: ${there.whyThroughHost}`);
          const back = await h.cliJson(['migrate', String(pid), '--to-device', '0', '--json'], 600_000);
          await w.verify(p, ready, `${round}: after migrate back to GPU 0`);
          add('migrate_downtime_s', there.downtimeSeconds);
          add('migrate_back_downtime_s', back.downtimeSeconds);
          for (const [k, v] of Object.entries(there.suspend.phases ?? {})) add(`migrate.suspend.${k}_s`, v);
          for (const [k, v] of Object.entries(there.resume.phases ?? {})) add(`migrate.resume.${k}_s`, v);
          const hostThere = await h.cliJson(['migrate', String(pid), '--to-device', '1', '--via-host', '--json'], 600_000);
          const hostBack = await h.cliJson(['migrate', String(pid), '--to-device', '0', '--via-host', '--json'], 600_000);
          await w.verify(p, ready, `${round}: after migrate to GPU 1 and back through host memory`);
          add('migrate_via_host_downtime_s', hostThere.downtimeSeconds);
          add('migrate_via_host_back_downtime_s', hostBack.downtimeSeconds);
        }

        // checkpoint --leave-running: how long the application stops, and
        // when the image is durable; then the anchor's equivalent (driver
        // checkpoint, criu dump --leave-running, driver restore).
        const left = path.join(p.dir, `left-${i}`);
        const lr = await h.cliJson(['checkpoint', String(pid), '-o', left, '--leave-running', '--json'], 600_000);
        await w.verify(p, ready, `${round}: after checkpoint --leave-running`);
        if (lr.route !== 'gpu') h.say(`# ${round}: checkpoint --leave-running went through host memory: ${lr.whyThroughHost}`);
        add('leave_running_on_gpu', lr.route === 'gpu' ? 1 : 0);
        add('leave_running_pause_s', lr.pauseSeconds);
        add('leave_running_durable_s', lr.seconds);
        add('leave_running_image_bytes', du(left));
        for (const [k, v] of Object.entries(lr.phases ?? {})) add(`leave_running.${k}_s`, v);
        fs.rmSync(left, { recursive: true, force: true });
        const leftAnchor = path.join(p.dir, `left-anchor-${i}`);
        fs.mkdirSync(leftAnchor);
        const aPause = driver(pid, 'lock') + driver(pid, 'checkpoint') + criu(['dump', '-t', String(pid), '-D', leftAnchor, '-o', 'dump.log', '--leave-running']) + driver(pid, 'restore') + driver(pid, 'unlock');
        add('anchor_leave_running_pause_s', aPause);
        await w.verify(p, ready, `${round}: after the anchor's checkpoint --leave-running`);
        fs.rmSync(leftAnchor, { recursive: true, force: true });

      }

      const img = path.join(p.dir, `proc-${i}`);
      const ck = await traced(h, ['checkpoint', String(pid), '-o', img, '--json'], `${w.name}-${i}-checkpoint`);
      await gone(pid);
      add('ckpt_s', ck.seconds);
      // The command from its exec: node's start and the CLI's loading before the verb's own clock.
      add('ckpt_cmd_s', ck.seconds + ck.startSeconds);
      add('ckpt_gpu_free_s', ck.gpuFreeSeconds);
      add('ckpt.dump_s', ck.dumpSeconds);
      add('ckpt.sync_s', ck.syncSeconds);
      add('image_bytes', du(img));
      add('image_criu_bytes', du(path.join(img, 'criu')));
      // What the image holds: the pools' live bytes (raw) and CRIU's pages before compression.
      add('pool_raw_bytes', ck.rawBytes);
      if (ck.criuPages) add('criu_pages_raw_bytes', ck.criuPages.rawBytes);
      for (const [k, v] of Object.entries(ck.phases ?? {})) add(`ckpt_phase.${k}_s`, v);
      keepCriuLog(path.join(img, 'criu', 'dump.log'), `${w.name}-${i}-dump`);
      const rs = await traced(h, ['restore', img, '--detach', '--json'], `${w.name}-${i}-restore`);
      keepCriuLog(keptRestoreLog(`${w.name}-${i}-restore`), `${w.name}-${i}-restore`);
      add('restore_s', rs.seconds);
      add('restore_cmd_s', rs.seconds + rs.startSeconds);
      add('restore_gpu_checks_s', rs.gpuChecksSeconds);
      add('restore.criu_s', rs.criuSeconds);
      add('restore.load_s', rs.loadSeconds);
      add('restore.cleanup_s', rs.cleanupSeconds);
      for (const [k, v] of Object.entries(rs.resume?.phases ?? {})) add(`restore.${k}_s`, v);
      for (const [k, v] of Object.entries(rs.phases ?? {})) add(`restore_phase.${k}_s`, v);
      if (rs.criuPages) add('restore_criu_pages_unpack_s', rs.criuPages.seconds);
      if (rs.criuPages) add('restore_criu_pages_left_out_bytes', rs.criuPages.leftOutBytes ?? 0);
      await w.verify(p, ready, `${round}: after checkpoint + restore`);
      fs.rmSync(img, { recursive: true, force: true });

      if (process.env.BENCH_ANCHOR === '0') {
        h.say(`# ${round}: ckpt ${ck.seconds} s; restore ${rs.seconds} s (anchor left out: BENCH_ANCHOR=0)`);
        continue;
      }
      const anchor = path.join(p.dir, `anchor-${i}`);
      fs.mkdirSync(anchor);
      const lock = driver(pid, 'lock');
      const dck = driver(pid, 'checkpoint');
      const dump = criu(['dump', '-t', String(pid), '-D', anchor, '-o', 'dump.log']);
      // CRIU leaves its image in the page cache; made durable the way
      // gpuckpt makes its own CRIU files durable, for a like-for-like figure.
      const s0 = performance.now();
      await syncTree(anchor);
      const anchorSync = (performance.now() - s0) / 1000;
      await gone(pid);
      add('anchor_gpu_free_s', lock + dck);
      add('anchor_ckpt_s', lock + dck + dump);
      add('anchor_ckpt_durable_s', lock + dck + dump + anchorSync);
      add('anchor_image_bytes', du(anchor));
      const crs = criu(['restore', '-D', anchor, '-o', 'restore.log', '--restore-detached']);
      const drs = driver(pid, 'restore') + driver(pid, 'unlock');
      add('anchor_restore_s', crs + drs);
      add('anchor_driver_restore_s', drs);
      await w.verify(p, ready, `${round}: after the anchor's checkpoint + restore`);
      fs.rmSync(anchor, { recursive: true, force: true });
      h.say(`# ${round}: ckpt ${ck.seconds} s / anchor ${(lock + dck + dump + anchorSync).toFixed(2)} s durable (${(lock + dck + dump).toFixed(2)} s in the page cache); restore ${rs.seconds} s / anchor ${(crs + drs).toFixed(2)} s`);
    }
    await p.send('quit', 'bye').catch(() => undefined);
  } finally {
    keepAppLog(path.join(p.dir, 'out.err'), w.name);
    p.close();
  }
  return medians(m);
}

function summarize(metrics) {
  const g = (k) => metrics[k]?.median;
  const r = (a, b) => (g(a) && g(b) ? (g(b) / g(a)).toFixed(1) : '?');
  // An image gpuckpt makes durable is set against the anchor's made durable too.
  const anchorCkpt = g('anchor_ckpt_durable_s') !== undefined ? 'anchor_ckpt_durable_s' : 'anchor_ckpt_s';
  return (
    `median checkpoint ${g('ckpt_s')} s vs anchor ${g(anchorCkpt)?.toFixed(2)} s${anchorCkpt === 'anchor_ckpt_s' ? '' : ' durable'} (x${r('ckpt_s', anchorCkpt)}), ` +
    `restore ${g('restore_s')} s vs ${g('anchor_restore_s')?.toFixed(2)} s (x${r('restore_s', 'anchor_restore_s')})` +
    (g('suspend_gpu_free_s') !== undefined ? `, suspend ${g('suspend_gpu_free_s')} s, resume ${g('resume_s')} s` : '') +
    (g('migrate_downtime_s') !== undefined ? `, migrate ${g('migrate_downtime_s')} s` : '')
  );
}
