/**
 * Whole-process checkpoint orchestration on the CPU, with the fake driver
 * and a fake CRIU (test/fake-criu): what is refused before the process is
 * touched, what a failing dump leaves (the process running, no image), and
 * the shape of a complete image. Real dumps and restores run on GPU hosts
 * with CRIU 4.1.1 (npm run test:gpu).
 */
import { describe, expect, it } from 'vitest';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { sameBuffers } from '../controller/adapters/app-driver.js';
import { defaultHoldDir } from '../controller/engine/suspend.js';
import { hugeTmpfsRefused } from './helpers/huge-tmpfs.js';
import { APPS, checkpointingSandbox, eventually, json, lazyFreeKiB, mappingRssKiB, ROOT, within } from './helpers/e2e.js';

const { box, env } = checkpointingSandbox();

const start = () => box.start(APPS.linked, { env: { ...env, FAKE_CUDA_CKPT_BLOCK: '1' } });
const cli = (args: string[], extra: Record<string, string> = {}) => box.cli(args, { ...env, ...extra });
const psRow = (pid: number) => json<any[]>(cli(['ps', '--json']).stdout).find((r) => r.pid === pid);
const oneLine = (stderr: string) => expect(stderr.trimEnd().split('\n')).toHaveLength(1);

/** Whether the CLI running as child has CRIU dumping (not at its --version). */
const runsCriu = (child: { pid?: number }) =>
  readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, 'utf8')
    .split(' ')
    .filter(Boolean)
    .some((c) => readFileSync(`/proc/${c}/cmdline`, 'utf8').split('\0').includes('dump'));

/** A checkpoint that failed after the pause: nothing at out, no working directory left, the process running with its data. */
async function expectNoImageStillRunning(app: Awaited<ReturnType<typeof start>>['app'], ready: Awaited<ReturnType<typeof start>>['ready'], out: string): Promise<void> {
  expect(existsSync(out)).toBe(false);
  expect(readdirSync(box.dir).filter((n) => n.includes('gpuckpt-tmp'))).toEqual([]);
  expect(psRow(app.pid).poolState).toBe('active');
  expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
}

describe('whole-process checkpoint', () => {
  it('refuses a CRIU older than 4.0 before touching the process', async () => {
    const { app, ready } = await start();
    const r = cli(['checkpoint', String(app.pid), '-o', box.path('old')], { FAKE_CRIU_VERSION: '3.17' });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^gpuckpt: CRIU 3\.17 at .* is too old: 4\.0 or newer is needed/);
    oneLine(r.stderr);
    expect(psRow(app.pid).poolState).toBe('active');
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
  });

  it.each([
    ['a dump failing midway: the process resumes', 'failed', [], { FAKE_CRIU_FAIL: 'dump' }, 'criu dump of process PID failed: .*injected dump failure.*; process PID resumed'],
    ['a dump failing midway with --leave-running (the pool copied on its GPU): the process runs on', 'failed-left-running', ['--leave-running'], { FAKE_CRIU_FAIL: 'dump' }, 'criu dump of process PID failed: .*injected dump failure.*; process PID resumed'],
    ["the driver's checkpoint failing: the process resumes from the staging the shim holds", 'driver-failed', [], { GPUCKPT_TEST_DRIVER_FAULT: 'cuCheckpointProcessCheckpoint:1' }, 'suspend failed, process PID resumed: driver checkpoint of process PID failed'],
    ["the driver's checkpoint failing with --leave-running (the pool copied on its GPU): the process resumes from the copy", 'driver-failed-left-running', ['--leave-running'], { GPUCKPT_TEST_DRIVER_FAULT: 'cuCheckpointProcessCheckpoint:1' }, 'suspend failed, process PID resumed: driver checkpoint of process PID failed'],
  ])('%s with its data, and no image is left', async (_, name, extra, env, message) => {
    const { app, ready } = await start();
    const out = box.path(name);
    const r = cli(['checkpoint', String(app.pid), '-o', out, ...extra], env);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`^gpuckpt: ${message.replaceAll('PID', String(app.pid))}`));
    oneLine(r.stderr);
    await expectNoImageStillRunning(app, ready, out);
  });

  it("gpuckpt's own CRIU plugin, installed where CRIU loads plugins by default, stands aside when gpuckpt runs CRIU", async () => {
    const { app, ready } = await start();
    const plugins = { CRIU_LIBS_DIR: join(ROOT, 'build', 'criu') }; // the fake CRIU's default plugin directory
    const out = box.path('default-plugins');
    const r = cli(['checkpoint', String(app.pid), '-o', out, '--leave-running'], plugins);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(existsSync(join(out, 'criu', 'fake-criu-plugins'))).toBe(false); // no plugin in the image's inventory
    expect(existsSync(join(out, 'criu', `gpuckpt-pool-${app.pid}`))).toBe(false);
    expect(psRow(app.pid).poolState).toBe('active');
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
  });

  it('--leave-running: a complete image, and the process carries on with its data', async () => {
    const { app, ready } = await start();
    const out = box.path('left-running');
    const r = cli(['checkpoint', String(app.pid), '-o', out, '--leave-running', '--json']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(json(r.stdout)).toMatchObject({ pid: app.pid, image: out, leftRunning: true, criuVersion: '4.1.1' });
    expect(readdirSync(out).sort()).toEqual(['criu', 'gpu-needs.json', 'manifest', 'pool.zst']);
    // Started by the test runner, the application leads no session, and its
    // standard streams are sockets (node's pipes) to the runner: a shell
    // job, whose streams the restore connects to its own.
    const info = JSON.parse(readFileSync(join(out, 'criu', 'gpuckpt-process.json'), 'utf8'));
    expect(info).toMatchObject({
      pid: app.pid,
      shellJob: true,
      tree: [app.pid],
      members: [app.pid],
      nccl: false, // its restore asks nothing of a job that may end at once
      externalStdio: [0, 1, 2].map((fd) => ({ fd, resource: expect.stringMatching(/^socket:\[\d+\]$/) })),
    });
    const external = info.externalStdio.flatMap((s: { resource: string }) => ['--external', `unix[${s.resource.slice(8, -1)}]`]);
    expect(json(readFileSync(join(out, 'criu', 'fake-criu.json'), 'utf8'))).toEqual({ pid: app.pid, tree: [String(app.pid)], options: [...external, '--shell-job'], leaveRunning: 1, lazyFreeKiB: 0, dir: expect.any(String) });
    const ins = json(cli(['inspect', out, '--json']).stdout);
    expect(ins).toMatchObject({ kind: 'process', verified: true });
    expect(psRow(app.pid).poolState).toBe('active');
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
    expect((await app.command('info')).stack, 'the stack limit lowered for the driver, set again').toBe(1024);

    // Its PID is taken while it runs: restoring the image now is refused.
    const again = cli(['restore', out]);
    expect(again.code).toBe(3);
    expect(again.stderr).toMatch(new RegExp(`^gpuckpt: process ${app.pid} is running: CRIU restores a process under its own PID`));
  });

  it('--leave-running copies the pool on its GPU for the pause: the image holds the pool as it was then, and the process carries on', async () => {
    const { app, ready } = await start();
    const out = box.path('on-gpu');
    const r = cli(['checkpoint', String(app.pid), '-o', out, '--leave-running', '--json']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const s = json<any>(r.stdout);
    expect(s).toMatchObject({ route: 'gpu', leftRunning: true });
    expect(s.pauseSeconds).toBeGreaterThan(0);
    expect(Object.keys(s.phases)).toEqual(expect.arrayContaining(['copy', 'digest', 'release', 'driverCheckpoint', 'dump', 'remap', 'copyBack', 'reopen']));
    expect(readdirSync(out).sort()).toEqual(['criu', 'gpu-needs.json', 'manifest', 'pool.zst']);
    expect(json(readFileSync(join(out, 'criu', 'fake-criu.json'), 'utf8'))).toMatchObject({ pid: app.pid, leaveRunning: 1 });
    expect(readdirSync(box.dir).filter((n) => n.includes('gpuckpt-tmp'))).toEqual([]);
    expect(psRow(app.pid).poolState).toBe('active');
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
    // What the image holds is the pool at the pause, not what the process did after.
    const changed = (await app.command('mutate')).buffers;
    expect(sameBuffers(changed, ready.buffers)).toBe(false);
    expect(cli(['restore', out, '--into', String(app.pid)]).code).toBe(0);
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
  });

  it('--leave-running without room on the GPU for a copy goes through host memory, and says why', async () => {
    const { app, ready } = await start();
    const out = box.path('no-room-for-a-copy');
    const r = cli(['checkpoint', String(app.pid), '-o', out, '--leave-running', '--json'], { FAKE_NVML_FREE_MIB: '1536' });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(json<any>(r.stdout)).toMatchObject({ route: 'host', whyThroughHost: expect.stringMatching(/has 1\.50 GiB free, not room for a copy of 64\.0 MiB and 4\.00 GiB to spare/) });
    expect(json<any>(r.stdout).pauseSeconds).toBeGreaterThan(0);
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
    await app.command('mutate');
    expect(cli(['restore', out, '--into', String(app.pid)]).code).toBe(0);
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
  });

  it('--leave-running whose copy back fails: the shim takes the copy back, the process resumes from it with its data, no image', async () => {
    const { app, ready } = await start();
    const out = box.path('copy-back-failed');
    const r = cli(['checkpoint', String(app.pid), '-o', out, '--leave-running'], { GPUCKPT_TEST_FAULT: 'copy-back' });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`^gpuckpt: injected fault at copy-back .*; process ${app.pid} resumed from its pool's copy on the GPU; no image written\n$`));
    oneLine(r.stderr);
    await expectNoImageStillRunning(app, ready, out);
  });

  it('the host memory a suspend kept for the next one is not dumped with the process', async () => {
    const { app, ready } = await start();
    expect(cli(['suspend', String(app.pid)]).code).toBe(0);
    expect(cli(['resume', String(app.pid)]).code).toBe(0);
    expect(await eventually(() => lazyFreeKiB(app.pid) > 0)).toBe(true);
    const out = box.path('after-suspend');
    expect(cli(['checkpoint', String(app.pid), '-o', out, '--leave-running']).code).toBe(0);
    expect(json<any>(readFileSync(join(out, 'criu', 'fake-criu.json'), 'utf8')).lazyFreeKiB).toBe(0);
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
  });

  it('frees the staging only once the suspended shim has let go of it: the application never frees it, CRIU need not wait', async () => {
    const { app } = await start();
    const r = cli(['checkpoint', String(app.pid), '-o', box.path('freed-late')], { GPUCKPT_LOG: 'debug' });
    // The fake CRIU only stops the process it dumped: ended here.
    app.child.kill('SIGKILL');
    while (app.child.exitCode === null && app.child.signalCode === null) await new Promise((res) => setTimeout(res, 20));
    expect(r.code).toBe(0);
    const lines = r.stderr.split('\n');
    const at = (what: string) => lines.findIndex((l) => l.includes(what));
    // The suspend returns once the holder keeps the staging and the shim has dropped it (DROP_HELD);
    // the pool image is finished while CRIU dumps, and the controller's close comes after it.
    expect(at(`suspend ${app.pid}: hand-off done`)).toBeGreaterThanOrEqual(0);
    expect(at(`checkpoint: dump done`)).toBeGreaterThan(at(`suspend ${app.pid}: hand-off done`));
    expect(at(`pool image ${app.pid}: workers ended done`)).toBeGreaterThan(at(`suspend ${app.pid}: hand-off done`));
    expect(at(`pool image ${app.pid}: staging released done`)).toBeGreaterThan(at(`pool image ${app.pid}: workers ended done`));
  });

  it("--leave-running whose CRIU files cannot be made durable: no image, the process carries on", async () => {
    const { app, ready } = await start();
    const out = box.path('unsynced');
    const r = cli(['checkpoint', String(app.pid), '-o', out, '--leave-running'], { GPUCKPT_TEST_FAULT: 'criu-sync' });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`^gpuckpt: cannot make CRIU's files durable: injected fault at criu-sync .*; process ${app.pid} runs on; no image written`));
    oneLine(r.stderr);
    await expectNoImageStillRunning(app, ready, out);
  });

  it('CRIU files that cannot be made durable: CRIU has not ended the process, which resumes with its data; no image', async () => {
    const { app, ready } = await start();
    const out = box.path('unsynced-ended');
    const r = cli(['checkpoint', String(app.pid), '-o', out], { GPUCKPT_TEST_FAULT: 'criu-sync' });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`^gpuckpt: cannot make CRIU's files durable: injected fault at criu-sync .*; process ${app.pid} resumed\n$`));
    // The gate said no: the fake CRIU, which stands for CRIU's end of the tree by a SIGSTOP, did not stop it.
    await expectNoImageStillRunning(app, ready, out);
  });

  it("a pool image failing while CRIU dumps: CRIU has not ended the process, which resumes from the holder's copy with its data; no image", async () => {
    const { app, ready } = await start();
    const out = box.path('pool-unwritten');
    const r = cli(['checkpoint', String(app.pid), '-o', out], { GPUCKPT_TEST_FAULT: 'image-write', GPUCKPT_LOG: 'debug' });
    expect(r.code).toBe(1);
    // The image failed after the suspend had handed the staging over and returned: CRIU was dumping.
    expect(r.stderr).toMatch(new RegExp(`suspend ${app.pid}: hand-off done`));
    expect(r.stderr.split('\n').filter((l) => l.startsWith('gpuckpt: '))).toEqual([expect.stringMatching(new RegExp(`^gpuckpt: injected fault at image-write \\(GPUCKPT_TEST_FAULT\\).*; process ${app.pid} resumed$`))]);
    await expectNoImageStillRunning(app, ready, out);
    // What described the holder's copy went with the resume.
    expect(existsSync(defaultHoldDir(app.pid))).toBe(false);
    // Said in one line.
    const again = cli(['checkpoint', String(app.pid), '-o', out], { GPUCKPT_TEST_FAULT: 'image-write' });
    expect(again.stderr).toMatch(new RegExp(`^gpuckpt: injected fault at image-write .*; process ${app.pid} resumed\n$`));
    await expectNoImageStillRunning(app, ready, out);
  });

  it('the controller killed while CRIU waits at its gate: the process runs on, held, and resume brings it back with its data', async () => {
    const { app, ready } = await start();
    const out = box.path('killed-at-gate');
    const child = box.cliAsync(['checkpoint', String(app.pid), '-o', out], env);
    const exited = new Promise((r) => child.on('exit', r));
    // Stopped as soon as CRIU dumps (not at its --version), so that it cannot answer; CRIU then reaches its gate.
    expect(await within(20_000, () => runsCriu(child))).toBe(true);
    process.kill(child.pid!, 'SIGSTOP');
    const atGate = () => readdirSync(box.runDir).some((n) => n.startsWith('criu-gate-') && existsSync(join(box.runDir, n, 'reached')));
    expect(await within(20_000, atGate)).toBe(true);
    child.kill('SIGKILL');
    await exited;
    expect(existsSync(out)).toBe(false);
    expect(await within(20_000, () => psRow(app.pid)?.poolState === 'suspended')).toBe(true);
    const r = cli(['resume', String(app.pid)]);
    expect(r.stderr).toBe('');
    expect(psRow(app.pid).poolState).toBe('active');
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
    // The half image it was held in went with the resume.
    expect(readdirSync(box.dir).filter((n) => n.includes('gpuckpt-tmp'))).toEqual([]);
  });

  it("CRIU dumps the driver's copy of the device state without its zero pages; a failed dump resumes the process with the copy intact", async () => {
    // The fake driver's copy: 24 MiB, one page in four a pattern, checked at the driver's restore (status 70 if changed).
    const { app, ready } = await box.start(APPS.linked, { env: { ...env, FAKE_CUDA_CKPT_BLOCK: '1', FAKE_CUDA_DRIVER_COPY_MB: '24' } });
    const out = box.path('driver-copy');
    const child = box.cliAsync(['checkpoint', String(app.pid), '-o', out], { ...env, FAKE_CRIU_DUMP_DELAY_MS: '1500', GPUCKPT_TEST_FAULT: 'criu-sync' });
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    expect(await within(20_000, () => runsCriu(child))).toBe(true);
    // Then the context's stacks, lowered to 16 bytes a thread (8192 of them): zeros, dropped too.
    expect(mappingRssKiB(app.pid, 24 * 1024 + 128)).toBe(6 * 1024);
    expect(await exited).toBe(1);
    await expectNoImageStillRunning(app, ready, out);
    expect((await app.command('info')).stack, 'the stack limit set again').toBe(1024);
    expect(await app.quit()).toBe(0);
  });

  it.each([
    ['while CRIU dumps', true],
    ['once the job is suspended', false],
  ])('Ctrl-C %s: the job is brought back at the next safe point, no image, exit 130', async (_, atCriu) => {
    const { app, ready } = await start();
    const out = box.path(`interrupted-${atCriu}`);
    // CRIU dumps for 2 s: a CLI's ps to see the job suspended takes its time, and the signal must land before the checkpoint ends.
    const child = box.cliAsync(['checkpoint', String(app.pid), '-o', out], { ...env, GPUCKPT_LOG: 'warn', FAKE_CRIU_DUMP_DELAY_MS: '2000' });
    let stderr = '';
    child.stderr!.on('data', (d) => (stderr += d));
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    // Suspended: the controller has taken the signal over (before that, a Ctrl-C ends gpuckpt with nothing touched).
    expect(await within(20_000, () => runsCriu(child) || (!atCriu && psRow(app.pid)?.poolState === 'suspended'))).toBe(true);
    child.kill('SIGINT');
    expect(await exited).toBe(130);
    const lines = stderr.trimEnd().split('\n');
    expect(lines.at(-1)).toBe(`gpuckpt: interrupted by SIGINT; process ${app.pid} resumed`);
    expect(lines.slice(0, -1)).toEqual([expect.stringMatching(/^gpuckpt\[\d+\] checkpoint: SIGINT: the job is brought back at the next safe point, and no image is kept/)]);
    await expectNoImageStillRunning(app, ready, out);
  });

  it('the controller killed at points of a checkpoint --leave-running (the copy on its GPU): the process runs on, or resume brings it back with its data', { timeout: 120_000 }, async () => {
    const { app, ready } = await box.start(APPS.linked, { env: { ...env, FAKE_CUDA_CKPT_BLOCK: '1', FAKE_CUDA_SYNC_DELAY_MS: '20' } });
    const t0 = Date.now();
    const first = cli(['checkpoint', String(app.pid), '-o', box.path('lr-whole'), '--leave-running', '--json']);
    expect(json(first.stdout)).toMatchObject({ route: 'gpu' });
    const whole = Date.now() - t0;
    const seen: Record<string, number> = {};
    for (let i = 0; i < 10; i++) {
      const out = box.path(`lr-killed-${i}`);
      const child = box.cliAsync(['checkpoint', String(app.pid), '-o', out, '--leave-running'], env);
      const exited = new Promise((r) => child.on('exit', r));
      await new Promise((r) => setTimeout(r, (whole * (i + 1)) / 11));
      child.kill('SIGKILL');
      await exited;
      let row: any;
      expect(await within(30_000, () => ((row = psRow(app.pid)), row?.gate === 'open' || row?.poolState === 'suspended'))).toBe(true);
      const how = row.gate === 'open' ? 'running' : 'suspended';
      seen[how] = (seen[how] ?? 0) + 1;
      if (how === 'suspended') {
        const r = cli(['resume', String(app.pid)]);
        expect(r.stderr).toBe('');
      }
      expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
      if (existsSync(out)) expect(json(cli(['inspect', out, '--json']).stdout)).toMatchObject({ verified: true });
    }
    console.log(`checkpoint --leave-running killed: ${JSON.stringify(seen)}`);
  });

  it('restore refuses a --gpu-only image without --into', async () => {
    const { app } = await start();
    const out = box.path('gpu-only');
    expect(cli(['checkpoint', String(app.pid), '--gpu-only', '-o', out]).code).toBe(0);
    const r = cli(['restore', out]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/holds the GPU memory only .* --into PID/);
  });
});

describe('whole-process restore refusals', () => {
  it('refuses an image taken on another chip type before touching anything', async () => {
    const { app } = await start();
    const out = box.path('other-chip');
    expect(cli(['checkpoint', String(app.pid), '-o', out, '--leave-running']).code).toBe(0);
    // Rewrite the manifest as if the image came from an H100 (checksummed anew).
    const { decodeManifest, encodeManifest } = await import('../controller/image/index.js');
    const m = decodeManifest(readFileSync(join(out, 'manifest')), out);
    m.devices = m.devices.map((d) => ({ ...d, name: 'NVIDIA H100 80GB HBM3' }));
    writeFileSync(join(out, 'manifest'), encodeManifest(m));
    const r = cli(['restore', out]);
    expect(r.code).toBe(3);
    expect(r.stderr).toBe('gpuckpt: the image was taken on NVIDIA H100 80GB HBM3; this GPU is Fake CUDA Device 0: restore it on the same chip type\n');
    expect(psRow(app.pid).poolState).toBe('active');
  });

  it('refuses a damaged pool image before CRIU runs', async () => {
    const { app } = await start();
    const out = box.path('damaged');
    expect(cli(['checkpoint', String(app.pid), '-o', out, '--leave-running']).code).toBe(0);
    writeFileSync(join(out, 'manifest'), 'not a manifest');
    const r = cli(['restore', out]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^gpuckpt: image manifest .* is not a gpuckpt manifest/);
    expect(existsSync(join(out, 'criu', 'restore.log'))).toBe(false); // CRIU never started
  });

  // The driver's start slowed down: the check then ends at CRIU's post-restore gate, not before CRIU.
  it.each([
    ['before CRIU', {}],
    ["at CRIU's gate", { FAKE_CUDA_INIT_DELAY_MS: '1500' }],
  ])('refuses a target GPU without room before the process runs (%s)', async (when, slow) => {
    const { app } = await start();
    const out = box.path(`no-room-${when.replace(/\W+/g, '-')}`);
    expect(cli(['checkpoint', String(app.pid), '-o', out]).code).toBe(0);
    app.child.kill('SIGKILL'); // the fake CRIU only stops the dumped process
    while (app.child.exitCode === null && app.child.signalCode === null) await new Promise((r) => setTimeout(r, 20));
    const r = cli(['restore', out], { FAKE_NVML_FREE_MIB: '100', ...slow });
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/^gpuckpt: GPU \S+ has 100.0 MiB free; process \d+ needs .* there \(pool 64.0 MiB, about 768.0 MiB of CUDA context\): nothing was restored; choose another GPU with --device\n$/);
    expect(existsSync(join(out, 'criu', 'restore.log'))).toBe(false);
  });
});

describe("CRIU's pages", () => {
  /** A whole-process image of a fresh process, which is then ended (the fake CRIU only stops it), so its PID is free for a restore. */
  async function imageOfEnded(name: string, extra: string[] = []): Promise<{ out: string; summary: any }> {
    const { app } = await start();
    const out = box.path(name);
    const r = cli(['checkpoint', String(app.pid), '-o', out, '--json', ...extra]);
    expect(r.stderr).toBe('');
    app.child.kill('SIGKILL');
    while (app.child.exitCode === null && app.child.signalCode === null) await new Promise((res) => setTimeout(res, 20));
    return { out, summary: json(r.stdout) };
  }
  const criuFiles = (out: string) => readdirSync(join(out, 'criu')).filter((n) => n.startsWith('pages-') || n === 'gpuckpt-pages.json').sort();

  it('are compressed in the image, verified by inspect, and give CRIU back the memory it dumped', async () => {
    const { out, summary } = await imageOfEnded('pages');
    expect(criuFiles(out)).toEqual(['gpuckpt-pages.json', 'pages-1.img.zst']);
    expect(summary.criuPages).toMatchObject({ files: 1, rawBytes: 1027 * 4096 });
    expect(summary.criuPages.storedBytes).toBeLessThan(summary.criuPages.rawBytes);
    expect(json(cli(['inspect', out, '--json']).stdout)).toMatchObject({ verified: true, criuPages: { files: 1, rawBytes: 1027 * 4096 } });
    // The fake CRIU checks the memory its images give back against what it dumped, before its injected failure.
    const r = cli(['restore', out, '--detach'], { FAKE_CRIU_FAIL: 'restore' });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^gpuckpt: criu restore of .* failed: .*injected restore failure \(log: .*criu-restore-.*\.log\)\n$/);
    expect(readdirSync(join(out, 'criu')).filter((n) => n.endsWith('.log') || n.endsWith('.pid') || n.startsWith('fake-criu-restore'))).toEqual(['dump.log']); // a restore writes nothing into the image
  });

  it('a raw file that cannot be removed once packed: a note says so, the image verifies, and CRIU gets back the memory it dumped', async () => {
    const { app } = await start();
    const out = box.path('pages-left');
    const r = cli(['checkpoint', String(app.pid), '-o', out, '--json'], { GPUCKPT_TEST_FAULT: 'criu-pages-unlink' });
    expect(r.stderr).toBe('');
    expect(json(r.stdout).notes).toContainEqual(expect.stringMatching(/^CRIU's raw page file pages-1\.img \(injected fault at criu-pages-unlink .*\) could not be removed: the image keeps it beside its packed form$/));
    app.child.kill('SIGKILL');
    while (app.child.exitCode === null && app.child.signalCode === null) await new Promise((res) => setTimeout(res, 20));
    expect(criuFiles(out)).toEqual(['gpuckpt-pages.json', 'pages-1.img', 'pages-1.img.zst']);
    expect(json(cli(['inspect', out, '--json']).stdout)).toMatchObject({ verified: true });
    // The fake CRIU checks the memory its images give back against what it dumped, before its injected failure.
    const restore = cli(['restore', out, '--detach'], { FAKE_CRIU_FAIL: 'restore' });
    expect(restore.stderr).toMatch(/^gpuckpt: criu restore of .* failed: .*injected restore failure/);
  });

  it('a damaged one: inspect names it, restore refuses before CRIU runs', async () => {
    const { out } = await imageOfEnded('pages-damaged');
    const path = join(out, 'criu', 'pages-1.img.zst');
    const bytes = readFileSync(path);
    bytes[bytes.length >> 1] ^= 0xff;
    writeFileSync(path, bytes);
    expect(json(cli(['inspect', out, '--json']).stdout)).toMatchObject({ verified: false, problem: expect.stringMatching(/^image data is corrupt: pages-1\.img\.zst frame 0: /) });
    const r = cli(['restore', out, '--detach']);
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/^gpuckpt: image data is corrupt: pages-1\.img\.zst frame 0: /);
    oneLine(r.stderr);
  });

  it('CRIU writes them into a tmpfs of huge pages of its own where the checkpoint may mount one, its other files moved into the image; GPUCKPT_HUGE_SCRATCH=0: beside the image', async () => {
    const mayMount = !hugeTmpfsRefused(); // else CRIU writes beside the image
    for (const [name, extra] of [['pages-scratch', {}], ['pages-beside', { GPUCKPT_HUGE_SCRATCH: '0' }]] as const) {
      const { app } = await start();
      const out = box.path(name);
      const r = cli(['checkpoint', String(app.pid), '-o', out, '--json'], { ...extra, GPUCKPT_LOG: 'debug' });
      expect(r.code).toBe(0);
      const scratch = mayMount && name === 'pages-scratch';
      const dumped = json<{ dir: string }>(readFileSync(join(out, 'criu', 'fake-criu.json'), 'utf8'));
      expect(dumped.dir.startsWith('/dev/shm/.criu-dump.gpuckpt-tmp-')).toBe(scratch);
      expect(r.stderr.includes(`criu dump: scratch ${dumped.dir} on a tmpfs of its own with huge pages`)).toBe(scratch);
      if (!scratch) expect(dirname(dumped.dir)).toBe(box.dir); // beside the image, then moved into it
      expect(existsSync(dumped.dir)).toBe(false); // the scratch gone, or the directory beside the image made the image's
      expect(criuFiles(out)).toEqual(['gpuckpt-pages.json', 'pages-1.img.zst']);
      expect(readFileSync(join(out, 'criu', 'dump.log'), 'utf8')).toMatch(/fake-criu: dumped/);
      expect(json(cli(['inspect', out, '--json']).stdout)).toMatchObject({ verified: true, criuPages: { files: 1 } });
      app.child.kill('SIGKILL');
    }
  });

  it('--raw-criu-pages keeps them as CRIU wrote them, and restore takes them so', async () => {
    const { out, summary } = await imageOfEnded('pages-raw', ['--raw-criu-pages']);
    expect(criuFiles(out)).toEqual(['pages-1.img']);
    expect(summary.criuPages).toBeUndefined();
    const r = cli(['restore', out, '--detach'], { FAKE_CRIU_FAIL: 'restore' });
    expect(r.stderr).toMatch(/injected restore failure/);
  });
});

describe('whole-process checkpoint --force', () => {
  it('replaces an image but never other data at the path', async () => {
    const { app } = await start();
    const notAnImage = box.path('precious');
    mkdirSync(notAnImage);
    writeFileSync(join(notAnImage, 'thesis.tex'), 'years of work');
    const r = cli(['checkpoint', String(app.pid), '-o', notAnImage, '--leave-running', '--force']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/exists and is not a gpuckpt image: not replacing it/);
    expect(readFileSync(join(notAnImage, 'thesis.tex'), 'utf8')).toBe('years of work');

    const img = box.path('replace-me');
    expect(cli(['checkpoint', String(app.pid), '-o', img, '--leave-running']).code).toBe(0);
    expect(cli(['checkpoint', String(app.pid), '-o', img, '--leave-running', '--force']).code).toBe(0);
    expect(json(cli(['inspect', img, '--json']).stdout).verified).toBe(true);
  });
});
