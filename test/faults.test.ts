/**
 * Fault injection, one step at a time, through every step of checkpoint
 * and restore: the driver's calls fail through GPUCKPT_TEST_DRIVER_FAULT
 * (in the application for the shim's steps, in the CLI for the
 * controller's), CRIU's through the fake CRIU, the controller's own
 * through GPUCKPT_TEST_FAULT. test/gpu/faults.mjs runs the same matrix
 * on a real driver and real CRIU. After each: one line on
 * stderr, and the application running with its data (or, where the data
 * was already in place, with the new data), or held with its data safe and
 * brought back by the next command. No partial image is ever visible.
 * docs/RELIABILITY.md lists the same matrix with what was observed.
 */
import { describe, expect, it } from 'vitest';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { sameBuffers, type AppEvent, type BufferState } from '../controller/adapters/app-driver.js';
import { APPS, checkpointingSandbox, FAULTS_SHIM, json } from './helpers/e2e.js';

const { box, env } = checkpointingSandbox();

const cli = (args: string[], extra: Record<string, string> = {}) => box.cli(args, { ...env, ...extra });
const psRow = (pid: number) => json<{ pid: number; poolState: string; gate: string }[]>(cli(['ps', '--json']).stdout).find((r) => r.pid === pid);
const noTempDirs = () => expect(readdirSync(box.dir).filter((n) => n.includes('gpuckpt-tmp'))).toEqual([]);

/**
 * An application whose shim fails the nth call of fn it makes for the
 * controller (GPUCKPT_TEST_DRIVER_FAULT, the switch GPU hosts use too).
 */
async function start(fault?: { fn: string; nth: number }, extra: Record<string, string> = {}) {
  const failAt: Record<string, string> = fault ? { ...FAULTS_SHIM, GPUCKPT_TEST_DRIVER_FAULT: `${fault.fn}:${fault.nth}` } : {};
  const { app, ready } = await box.start(APPS.linked, { env: { ...env, FAKE_CUDA_CKPT_BLOCK: '1', ...failAt, ...extra } });
  return { app, R: ready.buffers as BufferState[] };
}

/** One line and the exit status: 1, a failure; 3, refused with everything as it was. */
function failsInOneLine(r: { code: number | null; stderr: string }, pattern: RegExp, status = 1): void {
  expect(r.code).toBe(status);
  expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
  expect(r.stderr).toMatch(pattern);
}

async function runsWith(app: { pid: number; command: (c: string) => Promise<AppEvent> }, want: BufferState[]): Promise<void> {
  expect(psRow(app.pid)).toMatchObject({ poolState: 'active', gate: 'open' });
  expect(sameBuffers((await app.command('state')).buffers, want)).toBe(true);
}

describe('checkpoint: each step failing', () => {
  const gpuOnly = (pid: number, out: string, extra = {}) => cli(['checkpoint', String(pid), '--gpu-only', '-o', out], extra);

  it('quiesce (a context synchronise fails): the application runs on, no image', async () => {
    const { app, R } = await start({ fn: 'cuCtxSynchronize', nth: 1 });
    const out = box.path('quiesce');
    failsInOneLine(gpuOnly(app.pid, out), /quiesce failed: the CUDA driver reported an error: cuCtxSynchronize returned CUDA_ERROR_UNKNOWN \(999\)$/m);
    expect(existsSync(out)).toBe(false);
    noTempDirs();
    await runsWith(app, R);
  });

  // The first cuMemcpyDtoHAsync of the pause brings the digests back; the third is the copy's second DMA.
  it('copy-out (the second DMA fails): the application runs on, no image', async () => {
    const { app, R } = await start({ fn: 'cuMemcpyDtoHAsync_v2', nth: 3 });
    const out = box.path('copy-out');
    failsInOneLine(gpuOnly(app.pid, out), /copy out failed: the CUDA driver reported an error: cuMemcpyDtoHAsync_v2 returned CUDA_ERROR_UNKNOWN \(999\)$/m);
    expect(existsSync(out)).toBe(false);
    noTempDirs();
    await runsWith(app, R);
  });

  it.each([
    ['compress', 'compress'],
    ['write', 'image-write'],
  ])('%s: the application runs on, no image', async (_step, fault) => {
    const { app, R } = await start();
    const out = box.path(`f-${fault}`);
    failsInOneLine(gpuOnly(app.pid, out, { GPUCKPT_TEST_FAULT: fault }), new RegExp(`injected fault at ${fault}`));
    expect(existsSync(out)).toBe(false);
    noTempDirs();
    await runsWith(app, R);
  });

  it('pool release (the driver keeps a chunk mapped): the process is resumed from its held data', async () => {
    const { app, R } = await start({ fn: 'cuMemUnmap', nth: 1 });
    failsInOneLine(cli(['suspend', String(app.pid)]), new RegExp(`suspend the pool failed: the CUDA driver reported an error: cuMemUnmap returned CUDA_ERROR_UNKNOWN \\(999\\); process ${app.pid} resumed`));
    await runsWith(app, R);
  });

  it.each([
    ['driver lock', 'cuCheckpointProcessLock'],
    ['driver checkpoint', 'cuCheckpointProcessCheckpoint'],
  ])('%s: the process is resumed with its data', async (_step, fn) => {
    const { app, R } = await start();
    failsInOneLine(cli(['suspend', String(app.pid)], { GPUCKPT_TEST_DRIVER_FAULT: `${fn}:1` }), new RegExp(`suspend failed, process ${app.pid} resumed: driver [a-z]+ of process ${app.pid} failed: ${fn} returned CUDA_ERROR_UNKNOWN \\(999\\)$`, 'm'));
    await runsWith(app, R);
    // A whole-process checkpoint through the same step: no image either.
    const out = box.path(`whole-${fn}`);
    failsInOneLine(cli(['checkpoint', String(app.pid), '-o', out], { GPUCKPT_TEST_DRIVER_FAULT: `${fn}:1` }), /resumed/);
    expect(existsSync(out)).toBe(false);
    noTempDirs();
    await runsWith(app, R);
  });

  it('criu dump: the process is resumed, no image', async () => {
    const { app, R } = await start();
    const out = box.path('dump');
    failsInOneLine(cli(['checkpoint', String(app.pid), '-o', out], { FAKE_CRIU_FAIL: 'dump' }), new RegExp(`injected dump failure.*; process ${app.pid} resumed`));
    expect(existsSync(out)).toBe(false);
    noTempDirs();
    await runsWith(app, R);
  });
});

describe('restore: each step failing', () => {
  /** The application at R with an image of R, then mutated to M. */
  async function rolledForward(fault?: { fn: string; nth: number }) {
    const { app, R } = await start(fault);
    const image = box.path(`img-${app.pid}`);
    expect(cli(['checkpoint', String(app.pid), '--gpu-only', '-o', image]).code).toBe(0);
    const M = (await app.command('mutate')).buffers as BufferState[];
    return { app, R, M, image };
  }

  it('read: restore --into touches nothing', async () => {
    const { app, M, image } = await rolledForward();
    failsInOneLine(cli(['restore', image, '--into', String(app.pid)], { GPUCKPT_TEST_FAULT: 'image-read' }), /injected fault at image-read/);
    await runsWith(app, M);
  });

  it('verify (a damaged frame): restore --into touches nothing', async () => {
    const { app, M, image } = await rolledForward();
    const { decodeManifest } = await import('../controller/image/index.js');
    const m = decodeManifest(readFileSync(join(image, 'manifest')), image);
    const { openSync, readSync, writeSync, closeSync } = await import('node:fs');
    const fd = openSync(join(image, m.data.file), 'r+');
    const b = Buffer.alloc(1);
    const at = Number(m.data.frames[0]!.offset) + 8;
    readSync(fd, b, 0, 1, at);
    b[0]! ^= 0x5a;
    writeSync(fd, b, 0, 1, at);
    closeSync(fd);
    failsInOneLine(cli(['restore', image, '--into', String(app.pid)]), /corrupt|checksum|damaged/i, 3);
    await runsWith(app, M);
  });

  it('reload (the second DMA into the pool fails): held half-restored, never run on the mix; the next rollback completes it', async () => {
    const { app, R, image } = await rolledForward({ fn: 'cuMemcpyHtoDAsync_v2', nth: 2 });
    failsInOneLine(cli(['restore', image, '--into', String(app.pid)]), new RegExp(`copy in failed: .*; process ${app.pid} stays paused with part of the image in its pool: run gpuckpt restore`));
    expect(psRow(app.pid)?.poolState).toBe('half-restored');
    failsInOneLine(cli(['checkpoint', String(app.pid), '--gpu-only', '-o', box.path('mix')]), /part of an image/, 3);
    expect(existsSync(box.path('mix'))).toBe(false);
    expect(cli(['restore', image, '--into', String(app.pid)]).code).toBe(0);
    await runsWith(app, R);
  });

  it('gate reopen (the controller fails after the last copy): the shim lets the application run on the restored data', async () => {
    const { app, R, image } = await rolledForward();
    failsInOneLine(cli(['restore', image, '--into', String(app.pid)], { GPUCKPT_TEST_FAULT: 'reopen' }), /injected fault at reopen/);
    await runsWith(app, R);
  });

  it('driver restore: the process stays suspended, and the next resume brings it back', async () => {
    const { app, R } = await start();
    expect(cli(['suspend', String(app.pid)]).code).toBe(0);
    failsInOneLine(cli(['resume', String(app.pid)], { GPUCKPT_TEST_DRIVER_FAULT: 'cuCheckpointProcessRestore:1' }), /stays suspended/);
    expect(psRow(app.pid)?.poolState).toBe('suspended');
    expect(cli(['resume', String(app.pid)]).code).toBe(0);
    await runsWith(app, R);
  });

  it('pool map (the driver refuses memory): the process stays suspended, and the next resume brings it back', async () => {
    const { app, R } = await start({ fn: 'cuMemCreate', nth: 1 });
    expect(cli(['suspend', String(app.pid)]).code).toBe(0);
    failsInOneLine(cli(['resume', String(app.pid)]), /stays suspended/);
    expect(psRow(app.pid)?.poolState).toBe('suspended');
    expect(cli(['resume', String(app.pid)]).code).toBe(0);
    await runsWith(app, R);
  });

  it("stack limit not lowered (the suspend's cuCtxSetLimit fails): the suspend goes on, the driver's copy holds the stacks whole", async () => {
    const { app, R } = await start({ fn: 'cuCtxSetLimit', nth: 1 }, { FAKE_CUDA_DRIVER_COPY_MB: '24' });
    const s = json<any>(cli(['suspend', String(app.pid), '--json']).stdout);
    // 18 MiB of the fake's copy are zeros, and so are its 1024-byte stacks for 8192 threads.
    expect(s.driverZeroBytes).toBe((18 << 20) + 1024 * 8192);
    expect(cli(['resume', String(app.pid)]).code).toBe(0);
    expect((await app.command('info')).stack).toBe(1024);
    await runsWith(app, R);
  });

  it('stack limit not set again (the resume\'s cuCtxSetLimit fails): the process stays suspended, and the next resume brings it back', async () => {
    const { app, R } = await start({ fn: 'cuCtxSetLimit', nth: 2 });
    expect(cli(['suspend', String(app.pid)]).code).toBe(0);
    failsInOneLine(cli(['resume', String(app.pid)]), /map the pool again failed: the CUDA driver reported an error: cuCtxSetLimit returned CUDA_ERROR_UNKNOWN \(999\): process \d+ stays suspended$/m);
    expect(psRow(app.pid)?.poolState).toBe('suspended');
    expect(cli(['resume', String(app.pid)]).code).toBe(0);
    expect((await app.command('info')).stack).toBe(1024);
    await runsWith(app, R);
  });

  it('reload after a suspend (a DMA back fails): the process stays suspended with its data held, and the next resume brings it back', async () => {
    const { app, R } = await start({ fn: 'cuMemcpyHtoDAsync_v2', nth: 1 });
    expect(cli(['suspend', String(app.pid)]).code).toBe(0);
    failsInOneLine(cli(['resume', String(app.pid)]), /copy in failed/);
    expect(psRow(app.pid)?.poolState).toBe('suspended');
    expect(cli(['resume', String(app.pid)]).code).toBe(0);
    await runsWith(app, R);
  });

  it('gate reopen after a suspend: the shim lets the application run on its data', async () => {
    const { app, R } = await start();
    expect(cli(['suspend', String(app.pid)]).code).toBe(0);
    failsInOneLine(cli(['resume', String(app.pid)], { GPUCKPT_TEST_FAULT: 'reopen' }), /injected fault at reopen/);
    await runsWith(app, R);
  });

  it('criu restore: nothing restored, the image intact (the real restore afterwards runs on GPU hosts)', async () => {
    const { app } = await start();
    const out = box.path('whole');
    expect(cli(['checkpoint', String(app.pid), '-o', out]).code).toBe(0);
    // The fake CRIU only stops a dumped process; gone, as after a real dump.
    app.child.kill('SIGKILL');
    while (app.child.exitCode === null && app.child.signalCode === null) await new Promise((r) => setTimeout(r, 20));
    failsInOneLine(cli(['restore', out, '--detach'], { FAKE_CRIU_FAIL: 'restore' }), /injected restore failure/);
    expect(json(cli(['inspect', out, '--json']).stdout).verified).toBe(true);
  });
});

describe('the production CLI', () => {
  it('has no fault injector: the test switches change nothing without it', async () => {
    const { app, R } = await start();
    const out = box.path('no-injector');
    const r = cli(['checkpoint', String(app.pid), '--gpu-only', '-o', out], { NODE_OPTIONS: '', GPUCKPT_TEST_FAULT: 'compress,image-write', GPUCKPT_TEST_DRIVER_FAULT: 'cuCheckpointProcessLock:1' });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(cli(['restore', out, '--into', String(app.pid)], { NODE_OPTIONS: '', GPUCKPT_TEST_FAULT: 'image-read,reopen' }).code).toBe(0);
    await runsWith(app, R);
  });
});
