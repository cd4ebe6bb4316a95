// Reliability on a real GPU, real driver and real CRIU (part of npm run
// test:gpu; docs/RELIABILITY.md records what these lines printed):
//   faults/*  the fault matrix of test/faults.test.ts, one line per step:
//             each step of checkpoint and restore fails (the shim's driver
//             calls and the controller's through GPUCKPT_TEST_DRIVER_FAULT,
//             the controller's own steps through GPUCKPT_TEST_FAULT, CRIU
//             through test/fake-criu in front of the real image); after
//             each the application runs with its data, or is held with it
//             safe and brought back by the next command; no partial image.
//   kill      the controller SIGKILLed at random points of checkpoints,
//             rollbacks, suspends and resumes (GPU_TEST_KILL_ROUNDS each,
//             default 10; half as many suspends and resumes).
//   soak      GPU_TEST_SOAK_CYCLES cycles (default 12) of checkpoint,
//             rollback, suspend/resume, and every GPU_TEST_SOAK_WHOLE_EVERY
//             (default 4; 0: never) a whole-process checkpoint and CRIU restore; data
//             verified after every step; GPU memory, open files and
//             resident memory must not grow from the first cycle to the
//             last.

import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { readProcFile } from './proc-files.mjs';

export async function runReliability(h) {
  const { ROOT, App, test, Skip, failure, sleep, cliCommand, track, cliJson, expectSame, launchViaFifo, gpuMemoryOf, snapPath, measure } = h;
  // The CLI with its test-only fault injector (test/helpers/fault-injector.mjs).
  const env = { ...process.env, NODE_OPTIONS: `--import=${pathToFileURL(path.join(ROOT, 'test', 'helpers', 'fault-injector.mjs')).href}` };
  const FAKE_CRIU = path.join(ROOT, 'test', 'fake-criu', 'criu');
  const hasCriu = () => spawnSync('criu', ['--version']).status === 0;

  /** The CLI with extra environment; killed after killAfterMs if given. */
  function gpuckpt(args, extra = {}, killAfterMs) {
    const [cmd, argv] = cliCommand(args);
    const t0 = performance.now();
    const child = track(spawn(cmd, argv, { cwd: ROOT, env: { ...env, ...extra }, stdio: ['ignore', 'pipe', 'pipe'] }));
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), killAfterMs ?? 300_000);
    return new Promise((res) =>
      child.on('close', (code, signal) => {
        clearTimeout(timer);
        res({ code, signal, stdout, stderr, ms: performance.now() - t0, killed: signal === 'SIGKILL' });
      }),
    );
  }
  async function ok(args, extra = {}) {
    const r = await gpuckpt(args, extra);
    if (r.code !== 0) throw failure(`gpuckpt ${args.join(' ')}: exit ${r.code ?? r.signal}: ${r.stderr.trim()}`);
    return r;
  }
  /** Exit status (1: a failure; 3: refused, untouched) with one line matching pattern; returns the line. */
  function failsInOneLine(r, pattern, what, status = 1) {
    const lines = r.stderr.trimEnd().split('\n');
    if (r.code !== status || lines.length !== 1 || !pattern.test(lines[0]))
      throw failure(`${what}: expected exit ${status} and one line matching ${pattern}, got exit ${r.code ?? r.signal}: ${r.stderr.trim()}`);
    return lines[0];
  }
  async function psRow(pid) {
    return (await cliJson(['ps', '--json'])).find((r) => r.pid === pid);
  }
  async function runsWith(app, want, what) {
    const row = await psRow(app.pid);
    if (row?.poolState !== 'active' || row?.gate !== 'open') throw failure(`${what}: process is ${row?.poolState}/${row?.gate}, not active/open`);
    if (!Object.keys(gpuMemoryOf(app.pid)).length) throw failure(`${what}: the process holds no GPU memory`);
    expectSame((await app.send('state', 'state')).buffers, want, what);
  }
  function noImage(out, what) {
    if (fs.existsSync(out)) throw failure(`${what}: an image was left at ${out}`);
    const temps = fs.readdirSync(path.dirname(out)).filter((n) => n.includes('gpuckpt-tmp'));
    if (temps.length) throw failure(`${what}: temporary image directories left: ${temps.join(', ')}`);
  }
  async function start(name, shimFault) {
    // The shim's fault injection is in its test build only (shim/testing).
    const faults = { GPUCKPT_SHIM: path.join(ROOT, 'build', 'test', 'shim', 'libgpuckpt.so'), GPUCKPT_TEST_DRIVER_FAULT: shimFault };
    const app = new App(name, 'static_cudart', [], { extraEnv: shimFault ? faults : {} });
    const R = (await app.ready()).buffers;
    return { app, R, pid: String(app.pid) };
  }
  const quote = (line) => `"${line.replace(/^gpuckpt: /, '').slice(0, 110)}"`;

  // ------------------------------------------------------ checkpoint steps --

  const failedCheckpoint = (step, { shim, cli = {}, pattern }) =>
    test(`faults/${step}`, async () => {
      const { app, R, pid } = await start(`faults/${step}`, shim);
      const out = snapPath(step);
      const line = failsInOneLine(await gpuckpt(['checkpoint', pid, '--gpu-only', '-o', out], cli), pattern, step);
      noImage(out, step);
      await runsWith(app, R, `after a failed ${step}`);
      return `checkpoint --gpu-only failed in one line (${quote(line)}); no image; the process runs with its data`;
    });
  await failedCheckpoint('quiesce', { shim: 'cuCtxSynchronize:1', pattern: /quiesce failed/ });
  // The digests' copy back is the pause's first cuMemcpyDtoHAsync: the third is the copy's second DMA.
  await failedCheckpoint('copy-out', { shim: 'cuMemcpyDtoHAsync_v2:3', pattern: /copy out failed/ });
  await failedCheckpoint('compress', { cli: { GPUCKPT_TEST_FAULT: 'compress' }, pattern: /injected fault at compress/ });
  await failedCheckpoint('write', { cli: { GPUCKPT_TEST_FAULT: 'image-write' }, pattern: /injected fault at image-write/ });

  await test('faults/pool-release', async () => {
    const { app, R, pid } = await start('faults/pool-release', 'cuMemUnmap:1');
    const line = failsInOneLine(await gpuckpt(['suspend', pid]), /suspend the pool failed: .*resumed/, 'pool release');
    await runsWith(app, R, 'after a failed pool release');
    return `suspend failed in one line (${quote(line)}); the process runs with its data`;
  });

  for (const [step, fn] of [
    ['driver-lock', 'cuCheckpointProcessLock'],
    ['driver-checkpoint', 'cuCheckpointProcessCheckpoint'],
  ]) {
    await test(`faults/${step}`, async () => {
      const { app, R, pid } = await start(`faults/${step}`);
      const fault = { GPUCKPT_TEST_DRIVER_FAULT: `${fn}:1` };
      const sus = failsInOneLine(await gpuckpt(['suspend', pid], fault), /suspend failed, process \d+ resumed/, `${step} in suspend`);
      await runsWith(app, R, `after ${step} failed in a suspend`);
      const out = snapPath(step);
      const whole = failsInOneLine(await gpuckpt(['checkpoint', pid, '-o', out], fault), /resumed/, `${step} in checkpoint`);
      noImage(out, step);
      await runsWith(app, R, `after ${step} failed in a checkpoint`);
      return `suspend (${quote(sus)}) and whole-process checkpoint (${quote(whole)}) failed in one line; no image; the process runs with its data on the GPU`;
    });
  }

  await test('faults/criu-dump', async () => {
    const { app, R, pid } = await start('faults/criu-dump');
    const out = snapPath('criu-dump');
    const line = failsInOneLine(await gpuckpt(['checkpoint', pid, '-o', out, '--criu', FAKE_CRIU], { FAKE_CRIU_FAIL: 'dump' }), /criu dump of process \d+ failed: .*resumed/, 'criu dump');
    noImage(out, 'criu dump');
    await runsWith(app, R, 'after a failed CRIU dump');
    return `checkpoint failed in one line after the driver had checkpointed the process (${quote(line)}); no image; the process runs with its data`;
  });

  await test('faults/leave-running', async () => {
    const { app, R, pid } = await start('faults/leave-running');
    const out = snapPath('leave-running');
    const args = ['checkpoint', pid, '-o', out, '--leave-running', '--criu', FAKE_CRIU];
    const dump = failsInOneLine(await gpuckpt(args, { FAKE_CRIU_FAIL: 'dump' }), /criu dump of process \d+ failed: .*resumed/, 'criu dump (copy on the GPU)');
    noImage(out, 'criu dump (copy on the GPU)');
    await runsWith(app, R, 'after a failed CRIU dump of a checkpoint --leave-running');
    const back = failsInOneLine(await gpuckpt(args, { GPUCKPT_TEST_FAULT: 'copy-back' }), /resumed from its pool's copy on the GPU; no image written/, 'copy back');
    noImage(out, 'copy back');
    await runsWith(app, R, 'after a failed copy back of a checkpoint --leave-running');
    return `checkpoint --leave-running (pool copied on the GPU) failed in one line at the dump (${quote(dump)}) and at the copy back (${quote(back)}); no image; the process runs with its data`;
  });

  /** A test of static_cudart under the real CRIU: body(p, ready) with the program launched (launchViaFifo) and ready. */
  const criuProgramTest = (name, body) =>
    test(name, async () => {
      if (!hasCriu()) throw new Skip('criu not on PATH (source .device/setup.sh)');
      const p = launchViaFifo('static_cudart');
      try {
        return await body(p, await p.nextLine('ready', 120_000));
      } finally {
        p.close();
      }
    });

  /** gpuckpt ARGS running until its CRIU dumps (not at CRIU's --version): the controller, and its end. */
  async function untilCriuDumps(args) {
    const [cmd, argv] = cliCommand(args);
    const ctl = track(spawn(cmd, argv, { cwd: ROOT, env, stdio: 'ignore' }));
    const gone = new Promise((r) => ctl.on('close', r));
    // A child listed may end before it is read (the controller's short-lived helpers): not CRIU dumping.
    const kids = (q) => (readProcFile(`/proc/${q}/task/${q}/children`).match(/\d+/g) ?? []).map(Number);
    const dumping = () => kids(ctl.pid).some((c) => readProcFile(`/proc/${c}/cmdline`).split('\0').includes('dump'));
    for (let t0 = Date.now(); !dumping(); await sleep(2)) if (Date.now() - t0 > 120_000) throw failure('CRIU did not start');
    return { ctl, gone };
  }

  // CRIU 4.1.1 itself waits at gpuckpt's gate (controller/adapters/criu-gate.ts).
  await criuProgramTest('faults/criu-gate', async (p, ready) => {
    const pid = String(ready.pid);
    const state = async (what) => expectSame((await p.send('state', 'state')).buffers, ready.buffers, what);
    // A failure while CRIU waits: the gate says no, CRIU lets the tree run, the process is resumed.
    const out = path.join(p.dir, 'unsynced');
    const line = failsInOneLine(await gpuckpt(['checkpoint', pid, '-o', out], { GPUCKPT_TEST_FAULT: 'criu-sync' }), new RegExp(`criu-sync .*; process ${pid} resumed$`), 'image not made durable');
    noImage(out, 'image not made durable');
    await state('after a checkpoint that failed while CRIU waited');
    // A pool image failing while CRIU dumps beside it: the gate says no, the process comes back from the holder's copy.
    const unwritten = path.join(p.dir, 'unwritten');
    const imageLine = failsInOneLine(await gpuckpt(['checkpoint', pid, '-o', unwritten], { GPUCKPT_TEST_FAULT: 'image-write' }), new RegExp(`image-write .*; process ${pid} resumed$`), 'pool image failed while CRIU dumped');
    noImage(unwritten, 'pool image failed while CRIU dumped');
    await state("after a checkpoint whose pool image failed while CRIU dumped (resumed from the holder's copy)");
    // The controller stopped once CRIU runs, then killed at the gate: the process stays suspended.
    const runDir = env.GPUCKPT_RUN_DIR ?? (env.XDG_RUNTIME_DIR ? path.join(env.XDG_RUNTIME_DIR, 'gpuckpt') : `/tmp/gpuckpt-${process.getuid()}`);
    const { ctl, gone } = await untilCriuDumps(['checkpoint', pid, '-o', path.join(p.dir, 'killed')]);
    process.kill(ctl.pid, 'SIGSTOP');
    const atGate = () => fs.readdirSync(runDir).some((n) => n.startsWith(`criu-gate-${ctl.pid}-`) && fs.existsSync(path.join(runDir, n, 'reached')));
    for (let t0 = Date.now(); !atGate(); await sleep(20)) if (Date.now() - t0 > 120_000) throw failure('CRIU did not reach the gate');
    ctl.kill('SIGKILL');
    await gone;
    const after = await settled(ready.pid);
    if (after !== 'suspended') throw failure(`after its controller died at the gate the process is ${after}, not suspended`);
    if (Object.keys(gpuMemoryOf(ready.pid)).length) throw failure('held at the gate but holding GPU memory');
    await ok(['resume', pid]);
    await state('after the resume of a process held at the gate');
    noImage(path.join(p.dir, 'killed'), 'a checkpoint killed at the gate');
    return `a failure while CRIU waited (${quote(line)}), a pool image failing while CRIU dumped (${quote(imageLine)}; resumed from the holder's copy) and a controller killed there (the process suspended, GPU free; resume brought it back) all left the process running with its data, no image`;
  });

  // checkpoint --leave-running's copy on the GPU, kept by the snapshot holder while CRIU dumps (engine/kept-copy.ts).
  await criuProgramTest('faults/leave-running-killed', async (p, ready) => {
    const pid = String(ready.pid);
    const { ctl, gone } = await untilCriuDumps(['checkpoint', pid, '-o', path.join(p.dir, 'killed'), '--leave-running']);
    ctl.kill('SIGKILL'); // CRIU dumps on and lets the process run, its pool released
    await gone;
    const after = await settled(ready.pid);
    if (after !== 'suspended') throw failure(`after its controller died in the dump the process is ${after}, not suspended`);
    await ok(['resume', pid]);
    expectSame((await p.send('state', 'state')).buffers, ready.buffers, 'after the resume from the kept copy');
    noImage(path.join(p.dir, 'killed'), 'a checkpoint --leave-running killed in the dump');
    return 'the controller killed while CRIU dumped: the process was left suspended, and resume took its pool\'s copy on the GPU back from the snapshot holder, data bit for bit';
  });

  // --------------------------------------------------------- restore steps --

  /** An application at R with an image of R, then mutated to M. */
  async function rolledForward(name, shimFault) {
    const s = await start(name, shimFault);
    const image = snapPath(name);
    await ok(['checkpoint', s.pid, '--gpu-only', '-o', image]);
    const M = (await s.app.send('mutate', 'mutated')).buffers;
    return { ...s, M, image };
  }

  await test('faults/read', async () => {
    const { app, pid, M, image } = await rolledForward('faults/read');
    const line = failsInOneLine(await gpuckpt(['restore', image, '--into', pid], { GPUCKPT_TEST_FAULT: 'image-read' }), /injected fault at image-read/, 'read');
    await runsWith(app, M, 'after a failed read');
    return `restore --into failed in one line (${quote(line)}); the process runs untouched`;
  });

  await test('faults/verify', async () => {
    const { app, pid, M, image } = await rolledForward('faults/verify');
    const { decodeManifest } = await import(path.join(ROOT, 'dist', 'controller', 'image', 'index.js'));
    const m = decodeManifest(fs.readFileSync(path.join(image, 'manifest')), image);
    const fd = fs.openSync(path.join(image, m.data.file), 'r+');
    const at = Number(m.data.frames[0].offset) + 8;
    const b = Buffer.alloc(1);
    fs.readSync(fd, b, 0, 1, at);
    b[0] ^= 0x5a;
    fs.writeSync(fd, b, 0, 1, at);
    fs.closeSync(fd);
    const line = failsInOneLine(await gpuckpt(['restore', image, '--into', pid]), /corrupt|checksum|damaged/i, 'verify', 3);
    await runsWith(app, M, 'after a damaged image was refused');
    return `a flipped byte in the first frame: restore --into refused in one line (${quote(line)}); the process runs untouched`;
  });

  await test('faults/reload', async () => {
    const { app, R, pid, image } = await rolledForward('faults/reload', 'cuMemcpyHtoDAsync_v2:2');
    const line = failsInOneLine(await gpuckpt(['restore', image, '--into', pid]), /copy in failed: .*stays paused/, 'reload');
    const held = (await psRow(app.pid))?.poolState;
    if (held !== 'half-restored') throw failure(`after a failed reload the process is ${held}, not half-restored`);
    const mix = snapPath('mix');
    failsInOneLine(await gpuckpt(['checkpoint', pid, '--gpu-only', '-o', mix]), /part of an image/, 'checkpoint of a half-restored pool', 3);
    noImage(mix, 'checkpoint of a half-restored pool');
    await ok(['restore', image, '--into', pid]);
    await runsWith(app, R, 'after the second rollback');
    return `restore --into failed in one line (${quote(line)}); held half-restored, its checkpoint refused; the next restore --into completed it`;
  });

  await test('faults/gate-reopen', async () => {
    const { app, R, pid, image } = await rolledForward('faults/gate-reopen');
    const line = failsInOneLine(await gpuckpt(['restore', image, '--into', pid], { GPUCKPT_TEST_FAULT: 'reopen' }), /injected fault at reopen/, 'gate reopen');
    await runsWith(app, R, 'after the controller failed after its last copy');
    return `restore --into failed after its last copy (${quote(line)}); the shim let the process run on the restored data`;
  });

  /** Suspended, then a resume failing at one step; the next resume brings it back. */
  const failedResume = (step, { shim, cli = {}, pattern }) =>
    test(`faults/${step}`, async () => {
      const { app, R, pid } = await start(`faults/${step}`, shim);
      await ok(['suspend', pid]);
      const line = failsInOneLine(await gpuckpt(['resume', pid], cli), pattern, step);
      const state = (await psRow(app.pid))?.poolState;
      if (state !== 'suspended') throw failure(`after a failed ${step} the process is ${state}, not suspended`);
      await ok(['resume', pid]);
      await runsWith(app, R, `after the resume that followed a failed ${step}`);
      return `resume failed in one line (${quote(line)}); the process stayed suspended; the next resume brought it back with its data`;
    });
  await failedResume('driver-restore', { cli: { GPUCKPT_TEST_DRIVER_FAULT: 'cuCheckpointProcessRestore:1' }, pattern: /stays suspended/ });
  await failedResume('pool-map', { shim: 'cuMemCreate:1', pattern: /stays suspended/ });
  await failedResume('reload-after-suspend', { shim: 'cuMemcpyHtoDAsync_v2:1', pattern: /copy in failed/ });
  // The second cuCtxSetLimit of the control thread sets back the limit the suspend lowered (one context).
  await failedResume('stack-set-back', { shim: 'cuCtxSetLimit:2', pattern: /cuCtxSetLimit returned .*stays suspended/ });

  await test('faults/stack-lower', async () => {
    const { app, R, pid } = await start('faults/stack-lower', 'cuCtxSetLimit:1');
    await ok(['suspend', pid]);
    await ok(['resume', pid]);
    await runsWith(app, R, 'after a suspend whose stack limit could not be lowered');
    return "the suspend's cuCtxSetLimit failed: suspend and resume went on, the driver's copy holding the stacks whole; the process runs with its data";
  });

  await test('faults/gate-reopen-after-suspend', async () => {
    const { app, R, pid } = await start('faults/gate-reopen-after-suspend');
    await ok(['suspend', pid]);
    const line = failsInOneLine(await gpuckpt(['resume', pid], { GPUCKPT_TEST_FAULT: 'reopen' }), /injected fault at reopen/, 'gate reopen');
    await runsWith(app, R, 'after the resume failed after its last copy');
    return `resume failed after its last copy (${quote(line)}); the shim let the process run on its data`;
  });

  await failedRestoreTest('faults/criu-restore', async (image, pid, p) => {
    const line = failsInOneLine(await gpuckpt(['restore', image, '--detach', '--criu', FAKE_CRIU], { FAKE_CRIU_FAIL: 'restore' }), /injected restore failure/, 'criu restore');
    if (p.alive(pid)) throw failure('a failed CRIU restore left a process running');
    if (!(await cliJson(['inspect', image, '--json'])).verified) throw failure('the image no longer verifies after a failed CRIU restore');
    return `restore failed in one line (${quote(line)}); the image still verifies`;
  });

  // The GPU checks run beside CRIU, which holds what it brought back at its
  // post-restore gate until they pass: a refusal there ends them unrun.
  await failedRestoreTest('faults/restore-gate', async (image, pid, p) => {
    const line = failsInOneLine(await gpuckpt(['restore', image, '--detach'], { GPUCKPT_TEST_FAULT: 'gpu-checks' }), /injected fault at gpu-checks/, 'GPU checks');
    for (let i = 0; i < 100 && p.alive(pid); i++) await sleep(50);
    if (p.alive(pid)) throw failure('a restore refused by its GPU checks left a process running');
    if (!(await cliJson(['inspect', image, '--json'])).verified) throw failure('the image no longer verifies after a refused restore');
    return `restore refused in one line (${quote(line)}); no process left; the image still verifies`;
  });

  await failedRestoreTest('faults/damaged-pool-restore', async (image, pid, p) => {
    // One byte of the pool's data flipped: found while CRIU restores the
    // process, after it is back.
    const fd = fs.openSync(path.join(image, 'pool.zst'), 'r+');
    try {
      const at = Math.floor(fs.fstatSync(fd).size / 2);
      const byte = Buffer.alloc(1);
      fs.readSync(fd, byte, 0, 1, at);
      fs.writeSync(fd, Buffer.from([byte[0] ^ 0x5a]), 0, 1, at);
      const line = failsInOneLine(await gpuckpt(['restore', image, '--detach']), new RegExp(`image data is corrupt: .*; the restored process ${pid} was ended$`), 'damaged pool image');
      for (let i = 0; i < 100 && p.alive(pid); i++) await sleep(50);
      if (p.alive(pid)) throw failure('the restored process was left running without its GPU data');
      fs.writeSync(fd, byte, 0, 1, at);
      return `restore failed in one line (${quote(line)}); the process CRIU had brought back was ended; the byte was put back`;
    } finally {
      fs.closeSync(fd);
    }
  });

  await killTest();
  await soakTest();

  /**
   * A whole-process image of static_cudart, whose restore fails(image, pid,
   * p) makes fail and checks (saying what it saw); the image, restored for
   * real afterwards, must bring the process back under its pid with its data.
   */
  async function failedRestoreTest(name, fails) {
    await criuProgramTest(name, async (p, ready) => {
      const image = path.join(p.dir, 'whole');
      await ok(['checkpoint', String(ready.pid), '-o', image]);
      for (let i = 0; i < 100 && p.alive(ready.pid); i++) await sleep(50);
      const what = await fails(image, ready.pid, p);
      const back = await cliJson(['restore', image, '--detach', '--json'], 300_000);
      if (back.pid !== ready.pid) throw failure(`restore gave pid ${back.pid}, expected ${ready.pid}`);
      expectSame((await p.send('state', 'state')).buffers, ready.buffers, 'state after the real restore');
      return `${what}; the real CRIU restore of the image afterwards brought the process back with its data`;
    });
  }

  // --------------------------------------------------------------- kills --

  /** The process once it has settled after a lost controller (within the 30 s lease). */
  async function settled(pid) {
    const t0 = Date.now();
    for (;;) {
      const row = await psRow(pid);
      if (row?.poolState === 'half-restored' || row?.poolState === 'suspended') return row.poolState;
      if (row?.gate === 'open') return 'running';
      if (Date.now() - t0 > 30_000) throw failure(`process ${pid} still paused 30 s after its controller was killed: ${JSON.stringify(row)}`);
      await sleep(20);
    }
  }

  async function killTest() {
    await test('kill', async () => {
      const rounds = Number(env.GPU_TEST_KILL_ROUNDS ?? 10);
      let seed = Number(env.GPU_TEST_KILL_SEED ?? 20261122) >>> 0;
      const random = () => ((seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32);
      const { app, R, pid } = await start('kill');
      const base = snapPath('kill-base');
      const took = {};
      const timed = async (kind, args) => {
        const r = await ok(args);
        took[kind] = r.ms;
      };
      await timed('ckpt', ['checkpoint', pid, '--gpu-only', '-o', base]);
      let current = (await app.send('mutate', 'mutated')).buffers;
      await timed('roll', ['restore', base, '--into', pid]);
      current = R;
      await timed('suspend', ['suspend', pid]);
      await timed('resume', ['resume', pid]);
      const seen = { ckpt: 0, roll: 0, suspend: 0, resume: 0, halfRestored: 0, imagesLeft: 0, worstSettleMs: 0 };
      const killed = async (kind, args) => {
        const r = await gpuckpt(args, {}, Math.max(1, random() * took[kind]));
        const t0 = Date.now();
        const state = await settled(app.pid);
        seen.worstSettleMs = Math.max(seen.worstSettleMs, Date.now() - t0);
        if (r.killed) seen[kind]++;
        return state;
      };
      for (let i = 0; i < rounds; i++) {
        const out = snapPath(`kill-${i}`);
        if ((await killed('ckpt', ['checkpoint', pid, '--gpu-only', '-o', out])) !== 'running') throw failure('a killed checkpoint left the process paused');
        expectSame((await app.send('state', 'state')).buffers, current, `state after checkpoint kill ${i}`);
        if (fs.existsSync(out)) {
          seen.imagesLeft++;
          if (!(await cliJson(['inspect', out, '--json'])).verified) throw failure(`a killed checkpoint left an image that does not verify: ${out}`);
          fs.rmSync(out, { recursive: true });
        }
        current = (await app.send('mutate', 'mutated')).buffers;
        if ((await killed('roll', ['restore', base, '--into', pid])) === 'half-restored') {
          seen.halfRestored++;
          await ok(['restore', base, '--into', pid]);
        }
        const now = (await app.send('state', 'state')).buffers;
        if (now.some((b, j) => b.checksum !== R[j].checksum)) expectSame(now, current, `state after rollback kill ${i} (neither the image nor the state before)`);
        current = now;
        if (i < rounds / 2) {
          const afterSuspend = await killed('suspend', ['suspend', pid]);
          if (afterSuspend === 'half-restored') throw failure('a killed suspend left the process half-restored');
          if (afterSuspend === 'running') await ok(['suspend', pid]);
          const afterResume = await killed('resume', ['resume', pid]);
          if (afterResume === 'half-restored') throw failure('a killed resume left the process half-restored');
          if (afterResume === 'suspended') await ok(['resume', pid]);
          expectSame((await app.send('state', 'state')).buffers, current, `state after suspend/resume kill ${i}`);
        }
      }
      await app.quit();
      measure('kill', seen);
      return (
        `controller killed in ${seen.ckpt} checkpoints, ${seen.roll} rollbacks, ${seen.suspend} suspends, ${seen.resume} resumes (the rest finished first); ` +
        `the process answered within ${seen.worstSettleMs} ms each time with whole data; ${seen.imagesLeft} complete images left, none partial; ${seen.halfRestored} half-restored, completed by the next rollback`
      );
    });
  }

  // ---------------------------------------------------------------- soak --

  async function soakTest() {
    await test('soak', async () => {
      const cycles = Number(env.GPU_TEST_SOAK_CYCLES ?? 12);
      const wholeEvery = Number(env.GPU_TEST_SOAK_WHOLE_EVERY ?? 4) || Infinity; // 0: none
      if (wholeEvery <= cycles && !hasCriu()) throw new Skip('criu not on PATH (source .device/setup.sh)');
      const p = launchViaFifo('static_cudart');
      try {
        const ready = await p.nextLine('ready', 120_000);
        const pid = ready.pid;
        const state = async () => (await p.send('state', 'state')).buffers;
        const footprint = () => ({
          gpuMiB: Object.values(gpuMemoryOf(pid)).reduce((a, b) => a + b, 0),
          fds: fs.readdirSync(`/proc/${pid}/fd`).length,
          rssMiB: Math.round(Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]) / 1024),
        });
        let first;
        let wholes = 0;
        for (let c = 0; c < cycles; c++) {
          if (c === 1) first = footprint(); // after the first cycle: the staging and the driver's lazy state exist
          const A = await state();
          const image = path.join(p.dir, `soak-${c}`);
          await ok(['checkpoint', String(pid), '--gpu-only', '-o', image]);
          expectSame(await state(), A, `cycle ${c}: after checkpoint`);
          const M = (await p.send('mutate', 'mutated')).buffers;
          await ok(['restore', image, '--into', String(pid)]);
          expectSame(await state(), A, `cycle ${c}: after rollback`);
          fs.rmSync(image, { recursive: true });
          await p.send('mutate', 'mutated');
          const B = await state();
          await ok(['suspend', String(pid)]);
          if (Object.keys(gpuMemoryOf(pid)).length) throw failure(`cycle ${c}: suspended but still holding GPU memory`);
          await ok(['resume', String(pid)]);
          expectSame(await state(), B, `cycle ${c}: after suspend/resume`);
          if (M.every((b, j) => b.checksum === A[j].checksum)) throw failure(`cycle ${c}: mutate changed nothing`);
          if ((c + 1) % wholeEvery === 0) {
            const whole = path.join(p.dir, `soak-whole-${c}`);
            await ok(['checkpoint', String(pid), '-o', whole]);
            for (let i = 0; i < 100 && p.alive(pid); i++) await sleep(50);
            if (p.alive(pid)) throw failure(`cycle ${c}: the process still runs after its checkpoint`);
            const back = await cliJson(['restore', whole, '--detach', '--json'], 300_000);
            if (back.pid !== pid) throw failure(`cycle ${c}: restore gave pid ${back.pid}, expected ${pid}`);
            expectSame(await state(), B, `cycle ${c}: after whole-process checkpoint and restore`);
            fs.rmSync(whole, { recursive: true });
            wholes++;
          }
          // Long soaks run detached for many minutes: show where they are.
          if ((c + 1) % 25 === 0 && c + 1 < cycles) {
            const f = footprint();
            console.log(`# soak: ${c + 1}/${cycles} cycles, ${wholes} whole-process restores, GPU ${f.gpuMiB} MiB, ${f.fds} fds, resident ${f.rssMiB} MiB`);
          }
        }
        const last = footprint();
        for (const k of ['gpuMiB', 'fds']) if (last[k] > first[k]) throw failure(`${k} grew from ${first[k]} to ${last[k]} over ${cycles} cycles`);
        if (last.rssMiB > first.rssMiB + 8) throw failure(`resident memory grew from ${first.rssMiB} to ${last.rssMiB} MiB over ${cycles} cycles`);
        measure('soak', { cycles, wholes, ...Object.fromEntries(Object.entries(first).map(([k, v]) => [`first_${k}`, v])), ...Object.fromEntries(Object.entries(last).map(([k, v]) => [`last_${k}`, v])) });
        return `${cycles} cycles (${wholes} with a whole-process checkpoint and CRIU restore), data verified after every step (${cycles * 3 + wholes} checks), 0 mismatches; GPU memory ${first.gpuMiB}→${last.gpuMiB} MiB, open files ${first.fds}→${last.fds}, resident ${first.rssMiB}→${last.rssMiB} MiB`;
      } finally {
        p.close();
      }
    });
  }
}
