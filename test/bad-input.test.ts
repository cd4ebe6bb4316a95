/**
 * Bad input and failures: each answered by one clear line on stderr and a
 * non-zero exit, with nothing lost: the application keeps running with its
 * data, and no image that looks complete is left behind.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, statSync, truncateSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { sameBuffers } from '../controller/adapters/app-driver.js';
import { APPS, BIN, requireBuilt, ROOT, Sandbox, TEST_BUILD } from './helpers/e2e.js';

const box = new Sandbox();
beforeAll(requireBuilt);
afterAll(() => box.cleanup());

/** One line on stderr, starting with "gpuckpt: ", no stack trace. */
function expectOneLineError(r: { code: number | null; stderr: string }, pattern: RegExp): void {
  expect(r.code).not.toBe(0);
  expect(r.code).not.toBeNull();
  const lines = r.stderr.trimEnd().split('\n');
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(/^gpuckpt: /);
  expect(lines[0]).toMatch(pattern);
}

function flipByte(path: string, offset: number): void {
  const fd = openSync(path, 'r+');
  const b = Buffer.alloc(1);
  readSync(fd, b, 0, 1, offset);
  b[0] ^= 0x5a;
  writeSync(fd, b, 0, 1, offset);
  closeSync(fd);
}

let image = '';
let pid = 0;
let app: Awaited<ReturnType<Sandbox['start']>>['app'];
let ready: Awaited<ReturnType<Sandbox['start']>>['ready'];

describe('refusals', () => {
  beforeAll(async () => {
    ({ app, ready } = await box.start(APPS.linked));
    pid = app.pid;
    image = box.path('good');
    expect(box.cli(['checkpoint', String(pid), '--gpu-only', '-o', image]).code).toBe(0);
  });

  it('PID not running', () => {
    expectOneLineError(box.cli(['checkpoint', '4194000', '--gpu-only', '-o', box.path('x')]), /process 4194000 is not running/);
    expectOneLineError(box.cli(['restore', image, '--into', '4194000']), /process 4194000 is not running/);
  });

  it('not a PID', () => {
    expectOneLineError(box.cli(['checkpoint', 'abc', '--gpu-only', '-o', box.path('x')]), /"abc" is not a process ID/);
  });

  it('PID not under gpuckpt', () => {
    const other = spawn('sleep', ['30']);
    try {
      expectOneLineError(box.cli(['checkpoint', String(other.pid), '--gpu-only', '-o', box.path('x')]), /not running under gpuckpt/);
    } finally {
      other.kill();
    }
  });

  it('image missing', () => {
    expectOneLineError(box.cli(['restore', box.path('nope'), '--into', String(pid)]), /no image at/);
    expectOneLineError(box.cli(['inspect', box.path('nope')]), /no image at/);
  });

  // Idle workers started ahead keep no process alive: one that did would
  // hang until box.cli's timeout kills it, and have no exit status.
  it('a restore or a checkpoint refused with its workers started ahead (8, or the default for a bad --workers) still exits', () => {
    expectOneLineError(box.cli(['restore', box.path('nope'), '--workers', '8']), /no image at/);
    expectOneLineError(box.cli(['restore', box.path('nope'), '--workers', '0']), /--workers "0" must be a whole number from 1 to 256/);
    expectOneLineError(box.cli(['checkpoint', String(pid), '--gpu-only', '-o', image, '--workers', '8']), /exists/);
    expectOneLineError(box.cli(['checkpoint', String(pid), '--gpu-only', '-o', box.path('x'), '--workers', '0']), /--workers "0" must be a whole number from 1 to 256/);
  });

  it('output exists: refused, and --force replaces it', () => {
    expectOneLineError(box.cli(['checkpoint', String(pid), '--gpu-only', '-o', image]), /exists/);
    const copy = box.path('forced');
    expect(box.cli(['checkpoint', String(pid), '--gpu-only', '-o', copy]).code).toBe(0);
    const r = box.cli(['checkpoint', String(pid), '--gpu-only', '-o', copy, '--force']);
    expect(r.code).toBe(0);
    expect(box.cli(['inspect', copy, '--json']).code).toBe(0);
  });

  it('a whole-process checkpoint without CRIU is refused before touching the process', () => {
    expectOneLineError(box.cli(['checkpoint', String(pid), '-o', box.path('whole')], { GPUCKPT_CRIU: '/nonexistent/criu' }), /CRIU not found at \/nonexistent\/criu/);
    expect(existsSync(box.path('whole'))).toBe(false);
  });

  /** Each damaged image: restore refuses before touching the process. */
  async function expectRefusedUntouched(damaged: string, pattern: RegExp): Promise<void> {
    const before = await app.command('mutate');
    expectOneLineError(box.cli(['restore', damaged, '--into', String(pid)]), pattern);
    expect(sameBuffers((await app.command('state')).buffers, before.buffers)).toBe(true);
  }

  function copyImage(name: string): string {
    const dst = box.path(name);
    expect(spawnSync('cp', ['-r', image, dst]).status).toBe(0);
    return dst;
  }

  it('truncated data', async () => {
    const img = copyImage('truncated');
    const data = join(img, 'pool.zst');
    truncateSync(data, Math.floor(statSync(data).size / 2));
    await expectRefusedUntouched(img, /truncated/);
  });

  it('truncated manifest', async () => {
    const img = copyImage('truncated-manifest');
    truncateSync(join(img, 'manifest'), 60);
    await expectRefusedUntouched(img, /truncated/);
  });

  it('a flipped byte in the data', async () => {
    const img = copyImage('flipped-data');
    flipByte(join(img, 'pool.zst'), 5000);
    await expectRefusedUntouched(img, /corrupt/);
    const ins = box.cli(['inspect', img]);
    expect(ins.code).toBe(3);
    expect(ins.stdout).toMatch(/checksums\s+FAILED/);
  });

  it('a flipped byte in the manifest', async () => {
    const img = copyImage('flipped-manifest');
    flipByte(join(img, 'manifest'), 100);
    await expectRefusedUntouched(img, /corrupt/);
  });

  it('an unknown format version', async () => {
    const img = copyImage('future');
    const fd = openSync(join(img, 'manifest'), 'r+');
    writeSync(fd, Buffer.from([99, 0, 0, 0]), 0, 4, 8);
    closeSync(fd);
    await expectRefusedUntouched(img, /version 99/);
  });

  it('a layout that does not match', async () => {
    const other = await box.start(APPS.linked, { runArgs: ['--pool-base', '0x400000000000'] });
    const before = await other.app.command('mutate');
    expectOneLineError(box.cli(['restore', image, '--into', String(other.app.pid)]), /pool base/);
    expect(sameBuffers((await other.app.command('state')).buffers, before.buffers)).toBe(true);

    const extra = await box.start(APPS.linked);
    await extra.app.command('alloc 4096');
    const mutated = await extra.app.command('mutate');
    expectOneLineError(box.cli(['restore', image, '--into', String(extra.app.pid)]), /layout does not match.*does not/);
    expect(sameBuffers((await extra.app.command('state')).buffers, mutated.buffers)).toBe(true);
  });

  it('a good image still restores after all of that', async () => {
    expect(box.cli(['restore', image, '--into', String(pid)]).code).toBe(0);
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
  });
});

const isRoot = process.getuid?.() === 0;

describe('failures while writing', () => {
  it('compression failing (injected): one line, no image or temporary directory, the application runs on', async () => {
    const { app, ready } = await box.start(APPS.linked);
    const dir = box.path('fault-compress');
    mkdirSync(dir);
    const r = box.cli(['checkpoint', String(app.pid), '--gpu-only', '-o', join(dir, 'snap')], { GPUCKPT_TEST_FAULT: 'compress' });
    expectOneLineError(r, /injected fault at compress/);
    expect(readdirSync(dir)).toEqual([]);
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
  });

  it('reading the image failing (injected): restore --into touches nothing', async () => {
    const { app } = await box.start(APPS.linked);
    const image = box.path('fault-read');
    expect(box.cli(['checkpoint', String(app.pid), '--gpu-only', '-o', image]).code).toBe(0);
    const mutated = (await app.command('mutate')).buffers;
    expectOneLineError(box.cli(['restore', image, '--into', String(app.pid)], { GPUCKPT_TEST_FAULT: 'image-read' }), /injected fault at image-read/);
    expect(sameBuffers((await app.command('state')).buffers, mutated)).toBe(true);
  });

  it.skipIf(!isRoot)('disk full: the application continues and no image is left (needs root to mount a small tmpfs)', async () => {
    const mnt = box.path('full');
    mkdirSync(mnt);
    const m = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=8m', 'tmpfs', mnt]);
    if (m.status !== 0) return expect.soft(m.stderr.toString(), 'mount failed; cannot test disk full here').toBe('');
    try {
      const { app: a, ready: r } = await box.start(APPS.linked);
      const target = join(mnt, 'snap');
      expectOneLineError(box.cli(['checkpoint', String(a.pid), '--gpu-only', '-o', target]), /no space left on device/);
      expect(readdirSync(mnt)).toEqual([]); // neither the image nor its temporary directory
      expect(sameBuffers((await a.command('state')).buffers, r.buffers)).toBe(true);
    } finally {
      spawnSync('umount', [mnt]);
    }
  });

  /** Starts an application whose driver synchronises slowly, and a
   * checkpoint of it; resolves once the checkpoint has paused it (the shim's
   * quiesce has reached cuCtxSynchronize, which the idle application itself
   * never calls). */
  async function pausedByCheckpoint(name: string) {
    const trace = box.path(`${name}.trace`);
    const started = await box.start(APPS.linked, { env: { FAKE_CUDA_SYNC_DELAY_MS: '2000', FAKE_CUDA_TRACE: trace } });
    const target = box.path(name);
    const ctl = box.cliAsync(['checkpoint', String(started.app.pid), '--gpu-only', '-o', target]);
    await waitFor(() => existsSync(trace) && readFileSync(trace, 'utf8').includes('cuCtxSynchronize'));
    return { ...started, target, ctl };
  }

  it('controller killed during a checkpoint: the application continues, no image', async () => {
    const { app: a, ready: r, target, ctl } = await pausedByCheckpoint('killed');
    ctl.kill('SIGKILL');
    const t0 = Date.now();
    const state = await a.command('state');
    const resumedAfterMs = Date.now() - t0;
    expect(sameBuffers(state.buffers, r.buffers)).toBe(true);
    expect(resumedAfterMs).toBeLessThan(30_000); // bounded by the lease, not a timing claim
    expect(existsSync(target)).toBe(false);
  });

  it('application killed during a checkpoint: the controller says so, no image', async () => {
    const { app: a, target, ctl } = await pausedByCheckpoint('app-killed');
    let stderr = '';
    ctl.stderr!.on('data', (d) => (stderr += d));
    const exited = new Promise<number | null>((res) => ctl.on('exit', (code) => res(code)));
    a.child.kill('SIGKILL');
    expect(await exited).toBe(1);
    expect(stderr).toMatch(new RegExp(`^gpuckpt: (process ${a.pid} exited during|lost the connection to process ${a.pid})`));
    expect(existsSync(target)).toBe(false);
  });
});

describe('the control socket', () => {
  it('speaks the protocol and refuses malformed, truncated, oversized and unauthorised messages', async () => {
    const { app: a, ready: r } = await box.start(APPS.linked);
    const sock = join(box.runDir, `${a.pid}.sock`);
    const out = spawnSync(join(TEST_BUILD, 'protocol_client'), [sock, 'all'], { encoding: 'utf8', timeout: 60_000 });
    expect(out.stdout.trim().split('\n').pop()).toMatch(/^\d+ passed, 0 failed$/);
    expect(out.status).toBe(0);
    expect(sameBuffers((await a.command('state')).buffers, r.buffers)).toBe(true);
  });

  it('survives thousands of random messages, and the application keeps its data', async () => {
    const { app: a, ready: r } = await box.start(APPS.linked);
    const sock = join(box.runDir, `${a.pid}.sock`);
    const out = spawnSync(join(TEST_BUILD, 'protocol_client'), [sock, 'fuzz', '3000', '20261122'], { encoding: 'utf8', timeout: 120_000 });
    expect(out.stdout).toMatch(/^fuzz: 3000 messages, \d+ answered, \d+ connections dropped; server still serving$/m);
    expect(out.status).toBe(0);
    expect(sameBuffers((await a.command('state')).buffers, r.buffers)).toBe(true);
  });

  it.skipIf(!isRoot)('refuses a peer of another uid (needs root to act as a second uid)', async () => {
    const { app: a } = await box.start(APPS.linked);
    const sock = join(box.runDir, `${a.pid}.sock`);
    // Open the file permissions so only SO_PEERCRED stands in the way.
    chmodSync(box.dir, 0o711);
    chmodSync(box.runDir, 0o711);
    chmodSync(sock, 0o777);
    try {
      const out = spawnSync(join(TEST_BUILD, 'protocol_client'), [sock, 'as-uid', '65534'], { encoding: 'utf8' });
      expect(out.stdout).toMatch(/refused by the shim/);
      expect(out.status).toBe(0);
    } finally {
      chmodSync(sock, 0o600);
      chmodSync(box.runDir, 0o700);
      chmodSync(box.dir, 0o700);
    }
    expect((await a.command('state')).event).toBe('state');
  });
});

describe('without a driver the shim is inert', () => {
  const shim = join(ROOT, 'build', 'libgpuckpt.so');
  const run = (cmd: string[], env: Record<string, string>) =>
    spawnSync(cmd[0]!, cmd.slice(1), { env: { PATH: process.env.PATH ?? '', ...env }, encoding: 'utf8' });

  it('a program that uses no CUDA behaves the same', () => {
    const cmd = ['sh', '-c', 'echo hello; echo oops >&2; exit 3'];
    const plain = run(cmd, {});
    const shimmed = run(cmd, { LD_PRELOAD: shim });
    expect([shimmed.stdout, shimmed.stderr, shimmed.status]).toEqual([plain.stdout, plain.stderr, plain.status]);
  });

  it('a CUDA program on a machine without libcuda fails the same way', () => {
    const plain = run([APPS.procAddress], {});
    const shimmed = run([APPS.procAddress], { LD_PRELOAD: shim });
    expect(plain.status).not.toBe(0);
    expect([shimmed.stdout, shimmed.stderr, shimmed.status]).toEqual([plain.stdout, plain.stderr, plain.status]);
  });

  it('a driver that finds no device gives the same error', () => {
    const env = { LD_LIBRARY_PATH: join(TEST_BUILD, 'fake'), FAKE_CUDA_NO_DEVICE: '1' };
    const plain = run([APPS.linked], env);
    const shimmed = run([APPS.linked], { ...env, LD_PRELOAD: shim });
    expect(plain.stderr).toMatch(/cuInit failed/);
    expect([shimmed.stdout, shimmed.stderr, shimmed.status]).toEqual([plain.stdout, plain.stderr, plain.status]);
  });

  it('gpuckpt demo says there is no GPU in one line', () => {
    const r = spawnSync(BIN, ['demo'], { env: { ...process.env, LD_LIBRARY_PATH: '' }, encoding: 'utf8' });
    expectOneLineError({ code: r.status, stderr: r.stderr }, /no NVIDIA GPU on this machine/);
  });
});

async function waitFor(cond: () => boolean, timeoutMs = 20_000): Promise<void> {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > timeoutMs) throw new Error('condition not reached in time');
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('a command line that behaves', () => {
  it('reports an unknown option before a missing required one', () => {
    const r = box.cli(['checkpoint', '123', '--bogus']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/^gpuckpt: unknown option '--bogus'/);
    expectOneLineError(box.cli(['checkpoint', '123']), /^gpuckpt: required option '-o, --output <dir>' not specified/);
    expectOneLineError(box.cli(['migrate', '123']), /^gpuckpt: required option '--to-device <gpu>' not specified/);
  });

  it('names the real cause before a missing CRIU', () => {
    const noCriu = { GPUCKPT_CRIU: join(box.dir, 'no-criu') };
    const other = spawn('sleep', ['30']);
    try {
      expectOneLineError(box.cli(['checkpoint', String(other.pid), '-o', box.path('nc')], noCriu), /process \d+ is not running under gpuckpt/);
    } finally {
      other.kill();
    }
    // image (a --gpu-only image, made in beforeAll) restored without --into.
    expectOneLineError(box.cli(['restore', image], noCriu), /holds the GPU memory only \(a --gpu-only image\): restore it into a running process with --into PID/);
  });

  it('--json prints a JSON error with its stable code on failure', () => {
    const r = box.cli(['checkpoint', '4194000', '--gpu-only', '-o', box.path('x'), '--json']);
    expect(r.code).toBe(2);
    expect(JSON.parse(r.stdout)).toEqual({ error: { code: 'PID_NOT_RUNNING', message: 'process 4194000 is not running' } });
    const u = box.cli(['ps', '--bogus', '--json']);
    expect(JSON.parse(u.stdout)).toEqual({ error: { code: 'BAD_ARGUMENT', message: "unknown option '--bogus'" } });
  });

  it('refuses bad environment values in one line, before anything runs', () => {
    expectOneLineError(box.cli(['ps'], { GPUCKPT_LOG: 'bogus' }), /^gpuckpt: GPUCKPT_LOG="bogus" must be one of error, warn, info, debug$/);
    expectOneLineError(box.cli(['run', '--', '/bin/true'], { GPUCKPT_CHUNK_SIZE: '32Q' }), /^gpuckpt: GPUCKPT_CHUNK_SIZE="32Q" must be a size/);
    expectOneLineError(box.cli(['ps'], { GPUCKPT_CUT_TIMEOUT: '0' }), /^gpuckpt: GPUCKPT_CUT_TIMEOUT="0" must be a number of seconds above 0$/);
    expectOneLineError(box.cli(['ps'], { GPUCKPT_ALLOW_IO_URING: 'yes' }), /must be 0 or 1$/);
    // The shim reads only "keep": anything else would be taken silently as unset.
    expectOneLineError(box.cli(['ps'], { GPUCKPT_STACKS: 'kept' }), /^gpuckpt: GPUCKPT_STACKS="kept" must be keep, or unset$/);
    expectOneLineError(box.cli(['ps'], { GPUCKPT_DRIVER_ZEROS: '1' }), /^gpuckpt: GPUCKPT_DRIVER_ZEROS="1" must be keep, or unset$/);
    expect(box.cli(['ps'], { GPUCKPT_STACKS: 'keep', GPUCKPT_DRIVER_ZEROS: 'keep' }).code).toBe(0);
    expect(box.cli(['ps'], { GPUCKPT_HOST_RETAIN: '0', GPUCKPT_NCCL_TIMEOUT: '2.5' }).code).toBe(0);
  });

  it('prints completion scripts for bash and zsh made from its own commands', () => {
    const bash = box.cli(['completion', 'bash']);
    expect(bash.code).toBe(0);
    expect(spawnSync('bash', ['-n'], { input: bash.stdout }).status).toBe(0);
    const r = spawnSync('bash', ['-c', `${bash.stdout}\nCOMP_WORDS=(gpuckpt checkpoint 1 --gpu); COMP_CWORD=3; _gpuckpt; echo "\${COMPREPLY[@]}"; COMP_WORDS=(gpuckpt sus); COMP_CWORD=1; _gpuckpt; echo "\${COMPREPLY[@]}"`], { encoding: 'utf8' });
    expect(r.stdout).toBe('--gpu-only\nsuspend\n');
    expect(box.cli(['completion', 'zsh']).stdout).toMatch(/^autoload -U \+X bashcompinit && bashcompinit\n/);
    expectOneLineError(box.cli(['completion', 'fish']), /no completion for "fish": bash or zsh/);
  });
});
