/**
 * suspend / resume / migrate orchestration on the CPU: the real shim and CLI
 * against the fake driver, whose process checkpoint API keeps each target's
 * state in a file and (FAKE_CUDA_CKPT_BLOCK=1) holds the target's CUDA calls
 * while it is locked or checkpointed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { sameBuffers, type AppEvent } from '../controller/adapters/app-driver.js';
import { APPS, eventually, FAULTS_SHIM, json, lazyFreeKiB, mappingRssKiB, requireBuilt, ROOT, Sandbox } from './helpers/e2e.js';
import { driverKeeperPid } from '../controller/adapters/driver-keeper.js';

const box = new Sandbox();
const ckptDir = box.path('driver-state');
/** Both the application's and the CLI's fake driver see two devices and share the state directory. */
const fakeEnv = { FAKE_CUDA_DEVICES: '2', FAKE_CUDA_CKPT_DIR: ckptDir };

beforeAll(() => {
  requireBuilt();
  mkdirSync(ckptDir, { mode: 0o700 });
});
afterAll(() => box.cleanup());

const start = (extra: Record<string, string> = {}) => box.start(APPS.linked, { env: { ...fakeEnv, FAKE_CUDA_CKPT_BLOCK: '1', ...extra } });
const cli = (args: string[], extra: Record<string, string> = {}) => box.cli(args, { ...fakeEnv, ...extra });
const driverState = (pid: number) => (existsSync(join(ckptDir, String(pid))) ? readFileSync(join(ckptDir, String(pid)), 'utf8').split('\n')[0] : 'running');
const psRow = (pid: number) => json<any[]>(cli(['ps', '--json']).stdout).find((r) => r.pid === pid);

/** Sends a command without waiting for its answer. */
function ask(app: Awaited<ReturnType<typeof start>>['app'], cmd: string): Promise<AppEvent> {
  app.child.stdin!.write(cmd + '\n');
  return app.next(60_000);
}

describe('suspend and resume', () => {
  it('frees the GPU, holds the process, and brings it back with its data', async () => {
    const { app, ready } = await start();
    const to = box.path('held');
    const s = cli(['suspend', String(app.pid), '--to', to, '--json']);
    expect(s.stderr).toBe('');
    expect(s.code).toBe(0);
    expect(json(s.stdout)).toMatchObject({ pid: app.pid, image: to, rawBytes: ready.buffers!.reduce((n, b) => n + Math.ceil(b.size / 512) * 512, 0) });
    expect(driverState(app.pid)).toBe('checkpointed');
    const row = psRow(app.pid);
    expect(row.poolState).toBe('suspended');
    expect(row.devices[0].bytesMapped).toBe(0);
    expect(row.devices[0].allocations).toBe(4);

    // The application is held: its next CUDA call waits for the resume.
    let answered = false;
    const pending = ask(app, 'state').then((e) => ((answered = true), e));
    await new Promise((r) => setTimeout(r, 300));
    expect(answered).toBe(false);

    const r = cli(['resume', String(app.pid), '--json']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(sameBuffers((await pending).buffers, ready.buffers)).toBe(true);
    expect(driverState(app.pid)).toBe('running');
    expect(psRow(app.pid).poolState).toBe('active');
    expect(existsSync(to)).toBe(true); // an image the user placed is kept
    expect(cli(['inspect', to, '--json']).code).toBe(0);
  });

  it('holds the pool in host memory by default: nothing compressed, only its layout on file', async () => {
    const { app, ready } = await start();
    const s = json<any>(cli(['suspend', String(app.pid), '--json']).stdout);
    expect(s).toMatchObject({ heldIn: 'memory', storedBytes: 0 });
    expect(s.image).toMatch(new RegExp(`suspended-${app.pid}$`));
    expect(readdirSync(s.image).sort()).toEqual(['gpu-needs.json', 'held-layout.json']);
    expect(psRow(app.pid).poolState).toBe('suspended');
    expect(cli(['resume', String(app.pid)]).code).toBe(0);
    expect(existsSync(s.image)).toBe(false);
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
  });

  it('GPUCKPT_LOG=debug traces every phase of suspend and resume as it ends, stamped with the time of day and the seconds since the start; the default says nothing', async () => {
    const { app, ready } = await start();
    const s = cli(['suspend', String(app.pid)], { GPUCKPT_LOG: 'debug' });
    expect(s.code).toBe(0);
    const phases = (text: string, what: string) => [...text.matchAll(new RegExp(`^gpuckpt\\[\\d+\\] \\d\\d:\\d\\d:\\d\\d\\.\\d{3} \\+\\d+\\.\\d{3}s ${what} \\d+: (\\w+) done in \\d+\\.\\d{3} s$`, 'gm'))].map((m) => m[1]);
    expect(phases(s.stderr, 'suspend')).toEqual(expect.arrayContaining(['connect', 'checks', 'copy', 'release']));
    const r = cli(['resume', String(app.pid)], { GPUCKPT_LOG: 'debug' });
    expect(r.code).toBe(0);
    expect(phases(r.stderr, 'resume')).toEqual(expect.arrayContaining(['connect', 'checks', 'driverRestore', 'remap', 'reopen']));
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
    expect(cli(['suspend', String(app.pid)]).stderr).toBe('');
    expect(cli(['resume', String(app.pid)]).stderr).toBe('');
  });

  it("GPUCKPT_LOG=debug: a pool image's trace says where its frames' time went, in the workers and in the writes", async () => {
    const { app } = await start();
    const c = cli(['checkpoint', String(app.pid), '--gpu-only', '-o', box.path('traced'), '--workers', '2'], { GPUCKPT_LOG: 'debug' });
    expect(c.code).toBe(0);
    const line = c.stderr.split('\n').find((l) => / pool image \d+: \d+ frames on /.test(l));
    expect(line).toMatch(/: (\d+) frames on [12] workers in \d+\.\d{3} s: choose planes \d+\.\d{3} s, compress \d+\.\d{3} s in all; each worker busy \d+\.\d{3}-\d+\.\d{3} s; their writes \d+\.\d{3} s in all, on libuv's threads$/);
    const frames = json<any>(cli(['inspect', box.path('traced'), '--json']).stdout).data.frames.length;
    expect(Number(line!.match(/: (\d+) frames on/)![1])).toBe(frames);
    expect(await app.quit()).toBe(0);
  });

  it('leaves all-zero blocks on the GPU and zeroes them again at the resume, in memory or through an image', async () => {
    // The pool's memory after the resume is new from the driver: not zeros.
    const { app } = await start({ FAKE_CUDA_DIRTY_MEMORY: '1' });
    // Half of each buffer zeroed: 2 + 6 + 80 whole blocks of 256 KiB.
    const zeros = 88 * 256 * 1024;
    const Z = (await app.command('zero 50')).buffers!;
    const s = json<any>(cli(['suspend', String(app.pid), '--json']).stdout);
    expect(s).toMatchObject({ heldIn: 'memory', zeroBytes: zeros });
    expect(cli(['resume', String(app.pid)]).code).toBe(0);
    expect(sameBuffers((await app.command('state')).buffers, Z)).toBe(true);
    const to = json<any>(cli(['suspend', String(app.pid), '--to', box.path('zeros-held'), '--json']).stdout);
    // An image leaves out only zero runs of 2 MiB or more: the 40 MiB buffer's 80 blocks.
    expect(to).toMatchObject({ heldIn: 'image', zeroBytes: 80 * 256 * 1024 });
    expect(cli(['resume', String(app.pid)]).code).toBe(0);
    expect(sameBuffers((await app.command('state')).buffers, Z)).toBe(true);
    expect(await app.quit()).toBe(0);
  });

  it("drops the zero pages of the driver's copy of the device state, which the driver's restore reads back as it was", async () => {
    // The fake driver's copy: 24 MiB, one page in four a pattern, then the
    // context's stacks as zeros (its stack limit times 8192 threads); a
    // page it finds changed at the restore ends the process (status 70).
    // The shim lowers the limit from 1024 to 16 bytes: 128 KiB of stacks.
    const stacks = 16 * 8192;
    const copyKiB = (pid: number, bytes = (24 << 20) + stacks) => mappingRssKiB(pid, bytes / 1024);
    const { app, ready } = await start({ FAKE_CUDA_DRIVER_COPY_MB: '24' });
    for (const to of [undefined, box.path('driver-copy-image')]) {
      const s = json<any>(cli(['suspend', String(app.pid), '--json', ...(to ? ['--to', to] : [])]).stdout);
      expect(s.driverZeroBytes).toBe((18 << 20) + stacks);
      expect(copyKiB(app.pid)).toBe(6 * 1024);
      expect(cli(['resume', String(app.pid)]).code).toBe(0);
      expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
      expect((await app.command('info')).stack, 'the stack limit after the resume').toBe(1024);
    }
    expect(await app.quit()).toBe(0);

    // GPUCKPT_DRIVER_ZEROS=keep leaves it whole.
    const kept = await start({ FAKE_CUDA_DRIVER_COPY_MB: '24', GPUCKPT_DRIVER_ZEROS: 'keep' });
    expect(json<any>(cli(['suspend', String(kept.app.pid), '--json']).stdout).driverZeroBytes).toBe(0);
    expect(copyKiB(kept.app.pid)).toBe((24 << 10) + stacks / 1024);
    expect(cli(['resume', String(kept.app.pid)]).code).toBe(0);
    expect(await kept.app.quit()).toBe(0);
  });

  it("lowers each context's stack limit for the driver's checkpoint, so that its copy leaves out their local memory, and sets the limits again (GPUCKPT_STACKS=keep: as they are)", async () => {
    const stacksAt = (limit: number) => limit * 8192;
    for (const keep of [false, true]) {
      const { app, ready } = await start({ FAKE_CUDA_DRIVER_COPY_MB: '24', ...(keep ? { GPUCKPT_STACKS: 'keep' } : {}) });
      expect((await app.command('info')).stack).toBe(1024);
      const s = json<any>(cli(['suspend', String(app.pid), '--json']).stdout);
      expect(s.driverZeroBytes, keep ? 'stacks kept' : 'stacks lowered').toBe((18 << 20) + stacksAt(keep ? 1024 : 16));
      expect(cli(['resume', String(app.pid)]).code).toBe(0);
      expect((await app.command('info')).stack).toBe(1024);
      expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
      // Again: the limits kept by the first suspend were set back, and are lowered anew.
      expect(json<any>(cli(['suspend', String(app.pid), '--json']).stdout).driverZeroBytes).toBe(s.driverZeroBytes);
      expect(cli(['resume', String(app.pid)]).code).toBe(0);
      expect((await app.command('info')).stack).toBe(1024);
      expect(await app.quit()).toBe(0);
    }
  });

  it('keeps the host memory that held the pool, lazily freed, for the next suspend (GPUCKPT_HOST_RETAIN=0: none)', async () => {
    const { app, ready } = await start({ GPUCKPT_LOG: 'info' });
    const reused = () => app.stderr.split('\n').filter((l) => l.includes('host memory kept from the last suspend')).length;
    for (let round = 0; round < 3; round++) {
      expect(cli(['suspend', String(app.pid)]).code).toBe(0);
      await eventually(() => reused() >= round); // the application's log arrives through the event loop
      expect(reused(), `round ${round}: suspends that reused the memory kept`).toBe(round);
      expect(cli(['resume', String(app.pid)]).code).toBe(0);
      expect(sameBuffers((await app.command('state')).buffers, ready.buffers), `round ${round}: data after the resume`).toBe(true);
      // The release after a resume is on a thread of the shim's: the next suspend must find it done.
      expect(await eventually(() => lazyFreeKiB(app.pid) > 0), `round ${round}: nothing lazily freed`).toBe(true);
    }
    const other = await start({ GPUCKPT_HOST_RETAIN: '0' });
    expect(cli(['suspend', String(other.app.pid)]).code).toBe(0);
    expect(cli(['resume', String(other.app.pid)]).code).toBe(0);
    await new Promise((r) => setTimeout(r, 300));
    expect(lazyFreeKiB(other.app.pid)).toBe(0);
    expect(sameBuffers((await other.app.command('state')).buffers, other.ready.buffers)).toBe(true);
  });

  it('--to DIR: an image that fails after the GPU was freed resumes the process from memory', async () => {
    const { app, ready } = await start();
    const to = box.path('fails-late');
    const s = cli(['suspend', String(app.pid), '--to', to], { GPUCKPT_TEST_FAULT: 'image-write' });
    expect(s.code).toBe(1);
    expect(s.stderr).toMatch(new RegExp(`^gpuckpt: injected fault at image-write \\(GPUCKPT_TEST_FAULT\\); process ${app.pid} resumed\n$`));
    expect(existsSync(to)).toBe(false);
    expect(driverState(app.pid)).toBe('running');
    expect(psRow(app.pid).poolState).toBe('active');
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
  });

  it('refuses to suspend twice or to resume a running process, in one line', async () => {
    const { app } = await start();
    const notSuspended = cli(['resume', String(app.pid)]);
    expect(notSuspended.code).toBe(3);
    expect(notSuspended.stderr).toBe(`gpuckpt: process ${app.pid} is not suspended\n`);
    expect(cli(['suspend', String(app.pid)]).code).toBe(0);
    const twice = cli(['suspend', String(app.pid)]);
    expect(twice.code).toBe(3);
    expect(twice.stderr).toMatch(/^gpuckpt: process \d+ is already suspended/);
    expect(cli(['resume', String(app.pid)]).code).toBe(0);
  });

  it('a target GPU without room: the process stays suspended, and resumes later', async () => {
    // The application's 3rd cuMemCreate (the first chunk remapped) finds the GPU full.
    const { app, ready } = await start({ FAKE_CUDA_FAIL: 'cuMemCreate:3=2' });
    expect(cli(['suspend', String(app.pid)]).code).toBe(0);
    const r = cli(['resume', String(app.pid)]);
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/^gpuckpt: .*has no room for the pool .*stays suspended/);
    expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
    expect(driverState(app.pid)).toBe('checkpointed');
    expect(psRow(app.pid).poolState).toBe('suspended');
    expect(cli(['resume', String(app.pid)]).code).toBe(0);
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
  });

  it('a target GPU that NVML shows too full is refused before the driver restores anything', async () => {
    const { app, ready } = await start();
    // NVML sees the process holding 900 MiB on GPU 0, of which the pool is a few MiB.
    const seen = { FAKE_NVML_PROCESS_PID: String(app.pid), FAKE_NVML_PROCESS_MIB: '900' };
    expect(cli(['suspend', String(app.pid)], seen).code).toBe(0);
    const full = cli(['resume', String(app.pid), '--device', '1'], { FAKE_NVML_FREE_MIB: '81920,512' });
    expect(full.code).toBe(3);
    expect(full.stderr).toMatch(/^gpuckpt: GPU GPU-46414b45-0100-\S+ has 512.0 MiB free; process \d+ needs 964.0 MiB there \(pool 64.0 MiB, 836.0 MiB of CUDA context\): process \d+ stays suspended; resume it with --device on another GPU\n$/);
    expect(driverState(app.pid)).toBe('checkpointed'); // the driver was never asked
    expect(cli(['resume', String(app.pid), '--device', '1'], { FAKE_NVML_FREE_MIB: '81920,2048' }).code).toBe(0);
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
  });

  it('a driver without the checkpoint API: refused in one line before the process is touched', async () => {
    const { app, ready } = await start();
    const old = cli(['suspend', String(app.pid)], { LD_LIBRARY_PATH: join(ROOT, 'build', 'test', 'fake-old') });
    expect(old.code).toBe(3);
    expect(old.stderr).toBe('gpuckpt: this NVIDIA driver has no process checkpoint API (driver 570 or newer is needed)\n');
    expect(psRow(app.pid).poolState).toBe('active');
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
  });

  it('a driver checkpoint that fails: the process is resumed and says so', async () => {
    const { app, ready } = await start();
    const s = cli(['suspend', String(app.pid)], { FAKE_CUDA_FAIL: 'cuCheckpointProcessCheckpoint:1' });
    expect(s.code).toBe(1);
    expect(s.stderr).toMatch(new RegExp(`^gpuckpt: suspend failed, process ${app.pid} resumed: driver checkpoint`));
    expect(psRow(app.pid).poolState).toBe('active');
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
  });

  it('an image that cannot be written: suspend fails before releasing anything and the process runs on', async () => {
    const { app, ready } = await start();
    const s = cli(['suspend', String(app.pid), '--to', '/proc/gpuckpt-cannot-write-here']);
    expect(s.code).toBe(1);
    expect(s.stderr).toMatch(/^gpuckpt: /);
    expect(psRow(app.pid).poolState).toBe('active');
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
  });
});

describe('the driver keeper', () => {
  /** Running, not a zombie waiting for its reaper. */
  const runs = (pid: number) => {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
    } catch {
      return false;
    }
  };

  it('keeps the driver initialised while the process is suspended, and goes with the resume', async () => {
    const { app, ready } = await start();
    const s = json<any>(cli(['suspend', String(app.pid), '--json']).stdout);
    expect(s.driverKept).toBe(true);
    const keeper = driverKeeperPid(app.pid)!;
    expect(runs(keeper)).toBe(true);
    expect(readFileSync(`/proc/${keeper}/cmdline`, 'utf8')).toContain('gpuckpt-driver-keeper');
    // A refused second suspend leaves the keeper alone.
    expect(cli(['suspend', String(app.pid)]).code).toBe(3);
    expect(driverKeeperPid(app.pid)).toBe(keeper);
    expect(runs(keeper)).toBe(true);
    expect(cli(['resume', String(app.pid)]).code).toBe(0);
    expect(await eventually(() => !runs(keeper))).toBe(true);
    expect(driverKeeperPid(app.pid)).toBeUndefined();
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
  });

  it('ends by itself when the suspended process exits', async () => {
    const { app } = await start();
    expect(cli(['suspend', String(app.pid)]).code).toBe(0);
    const keeper = driverKeeperPid(app.pid)!;
    expect(runs(keeper)).toBe(true);
    process.kill(app.pid, 'SIGKILL');
    expect(await eventually(() => !runs(keeper))).toBe(true);
    // Its record stays behind, but names no keeper: a later process given
    // the same PID is not taken to have one.
    expect(driverKeeperPid(app.pid)).toBeUndefined();
  });

  it('--no-keep-driver leaves none, and a failed suspend ends the one it started', async () => {
    const { app } = await start();
    const s = json<any>(cli(['suspend', String(app.pid), '--no-keep-driver', '--json']).stdout);
    expect(s.driverKept).toBe(false);
    expect(driverKeeperPid(app.pid)).toBeUndefined();
    expect(cli(['resume', String(app.pid)]).code).toBe(0);
    const keepers = () => readdirSync('/proc').filter((p) => /^\d+$/.test(p) && runs(Number(p)) && readFileSync(`/proc/${p}/cmdline`, 'latin1').includes(`gpuckpt-driver-keeper\0${app.pid}\0`));
    expect(cli(['suspend', String(app.pid)], { FAKE_CUDA_FAIL: 'cuCheckpointProcessCheckpoint:1' }).code).toBe(1);
    await eventually(() => keepers().length === 0);
    expect(keepers()).toEqual([]);
    expect(driverKeeperPid(app.pid)).toBeUndefined();
  });
});

describe('migrate', () => {
  it('moves the process to another GPU with a full permutation of GPU pairs', async () => {
    const { app, ready } = await start();
    const m = cli(['migrate', String(app.pid), '--to-device', '1', '--json']);
    expect(m.stderr).toBe('');
    expect(m.code).toBe(0);
    const summary = json(m.stdout);
    expect(summary.device).toBe('GPU-46414b45-0100-0000-0000-000000000000');
    expect(typeof summary.downtimeSeconds).toBe('number');
    // GPU to GPU: the fake leaves the process's ordinals where they were, so
    // the remap finds the memory on the other device and copies it across.
    expect(summary).toMatchObject({ route: 'gpu', suspend: { heldIn: 'gpu' }, resume: { copyGBps: 0 } });
    expect(summary.resume.remapCopiedBytes).toBeGreaterThan(0);
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
  });

  it('goes through host memory when asked to (--via-host)', async () => {
    const { app, ready } = await start();
    const m = cli(['migrate', String(app.pid), '--to-device', '1', '--via-host', '--json']);
    expect(m.stderr).toBe('');
    expect(json(m.stdout)).toMatchObject({ route: 'host', whyThroughHost: 'asked to (--via-host)', suspend: { heldIn: 'memory' } });
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
  });

  it('goes through host memory when the application cannot take the GPU memory (an import fails)', async () => {
    const { app, ready } = await start({ ...FAULTS_SHIM, GPUCKPT_TEST_DRIVER_FAULT: 'cuMemImportFromShareableHandle:2' });
    const m = cli(['migrate', String(app.pid), '--to-device', '1', '--json']);
    expect(m.stderr).toBe('');
    expect(m.code).toBe(0);
    const summary = json(m.stdout);
    expect(summary).toMatchObject({ route: 'host', suspend: { heldIn: 'memory' } });
    expect(summary.whyThroughHost).toMatch(/copy the pool to another GPU/);
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
    expect(psRow(app.pid)).toMatchObject({ poolState: 'active', gate: 'open' });
  });

  it('keeps the data on the other GPU when the remap fails, and the next resume brings it back', async () => {
    // Imports 1 and 2 are the hold's (two chunks), 3 is the remap's first.
    const { app, ready } = await start({ ...FAULTS_SHIM, GPUCKPT_TEST_DRIVER_FAULT: 'cuMemImportFromShareableHandle:3' });
    const m = cli(['migrate', String(app.pid), '--to-device', '1']);
    expect(m.code).toBe(1);
    expect(m.stderr.trimEnd().split('\n')).toHaveLength(1);
    expect(m.stderr).toMatch(new RegExp(`process ${app.pid} stays suspended`));
    expect(psRow(app.pid).poolState).toBe('suspended');
    const r = cli(['resume', String(app.pid), '--json']);
    expect(r.stderr).toBe('');
    expect(json(r.stdout)).toMatchObject({ device: 'GPU-46414b45-0100-0000-0000-000000000000' });
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
  });

  it('brings the process back on its own GPU when the driver refuses to checkpoint it, the held memory copied home', async () => {
    const { app, ready } = await start();
    const m = cli(['migrate', String(app.pid), '--to-device', '1'], { GPUCKPT_TEST_DRIVER_FAULT: 'cuCheckpointProcessCheckpoint:1' });
    expect(m.code).toBe(1);
    expect(m.stderr.trimEnd().split('\n')).toHaveLength(1);
    expect(m.stderr).toMatch(new RegExp(`suspend failed, process ${app.pid} resumed`));
    expect(psRow(app.pid)).toMatchObject({ poolState: 'active', gate: 'open' });
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
  });

  it('makes room for the fds of every chunk in an application whose soft fd limit is short, and puts the limit back', async () => {
    // 2 MiB chunks: the test application's pool is then more chunks than a soft limit of 48 leaves fds for.
    const wrapper = box.path('low-fd-limit.sh');
    writeFileSync(wrapper, `#!/bin/sh\nulimit -Sn 48 || exit 1\nexec ${APPS.linked} "$@"\n`, { mode: 0o755 });
    const low = await box.start(wrapper, { env: { ...fakeEnv, FAKE_CUDA_CKPT_BLOCK: '1', GPUCKPT_CHUNK_SIZE: '2M' } });
    const softLimit = () => Number(/Max open files\s+(\d+)/.exec(readFileSync(`/proc/${low.app.pid}/limits`, 'utf8'))![1]);
    expect(softLimit()).toBe(48);
    // Without room made first, the hold's fds would not fit.
    expect(readdirSync(`/proc/${low.app.pid}/fd`).length + psRow(low.app.pid).devices[0].chunksInUse).toBeGreaterThan(48);
    const m = cli(['migrate', String(low.app.pid), '--to-device', '1', '--json']);
    expect(m.stderr).toBe('');
    expect(json(m.stdout)).toMatchObject({ route: 'gpu' });
    expect(sameBuffers((await low.app.command('state')).buffers, low.ready.buffers)).toBe(true);
    await new Promise((r) => setTimeout(r, 200)); // the held fds are closed on a thread of the shim's
    expect(softLimit()).toBe(48);
  });

  it('refuses an unknown GPU before touching the process', async () => {
    const { app, ready } = await start();
    const m = cli(['migrate', String(app.pid), '--to-device', '7']);
    expect(m.code).toBe(2);
    expect(m.stderr).toMatch(/^gpuckpt: no GPU "7" on this host \(2 GPU\(s\)/);
    expect(psRow(app.pid).poolState).toBe('active');
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
  });
});
