/**
 * Images as one stream (checkpoint -o - | restore -, --export / --import),
 * end to end with the fake driver and the fake CRIU: what arrives is the
 * image, bit for bit; a damaged or cut stream is refused before anything
 * is restored; nothing is left behind where the image passed.
 */
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, truncateSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sameBuffers } from '../controller/adapters/app-driver.js';
import { BIN, APPS, checkpointingSandbox, json } from './helpers/e2e.js';

const { box, env } = checkpointingSandbox();
const start = () => box.start(APPS.linked, { env: { ...env, FAKE_CUDA_CKPT_BLOCK: '1' } });
const cli = (args: string[], extra: Record<string, string> = {}) => box.cli(args, { ...env, ...extra });
const oneLine = (stderr: string) => expect(stderr.trimEnd().split('\n')).toHaveLength(1);
/** TMPDIR of its own per test, where streamed images pass: nothing may stay there. */
const passing = (name: string) => {
  const dir = box.path(`tmp-${name}`);
  spawnSync('mkdir', ['-p', dir]);
  return dir;
};
const pipe = (left: string[], right: string[], tmp: string) => {
  const q = (a: string[]) => [BIN, ...a].map((w) => `'${w.replace(/'/g, `'\\''`)}'`).join(' ');
  const r = spawnSync('bash', ['-o', 'pipefail', '-c', `${q(left)} | ${q(right)}`], { env: box.env({ ...env, TMPDIR: tmp }), encoding: 'utf8', timeout: 60_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
};

describe('where a streamed image passes', () => {
  it('TMPDIR when set, else /dev/shm when the image fits there, else beside its file (or the temporary dir)', async () => {
    const { passingParent } = await import('../controller/verbs/image-stream.js');
    expect(passingParent(1, '/beside', { TMPDIR: '/somewhere' })).toBe(tmpdir());
    if (existsSync('/dev/shm')) expect(passingParent(1, '/beside', {})).toBe('/dev/shm');
    expect(passingParent(Number.MAX_SAFE_INTEGER, '/beside', {})).toBe('/beside');
  });
});

describe('an image streamed', () => {
  it('checkpoint --gpu-only -o - | restore - --into: the process rolled back bit for bit, nothing left where it passed', async () => {
    const { app, ready } = await start();
    const tmp = passing('pipe');
    expect(sameBuffers((await app.command('mutate')).buffers, ready.buffers)).toBe(false);
    const mutated = (await app.command('state')).buffers;
    // Stream the mutated state, change it again, roll back to the streamed one.
    const file = box.path('s1.gpuckpt');
    const e = cli(['checkpoint', String(app.pid), '--gpu-only', '--export', file, '--json'], { TMPDIR: tmp });
    expect(e.stderr).toBe('');
    expect(json(e.stdout).stream).toMatchObject({ to: file, files: 2 });
    await app.command('mutate');
    const r = pipe(['checkpoint', String(app.pid), '--gpu-only', '-o', '-'], ['restore', '-', '--into', String(app.pid)], tmp);
    expect(r.stderr).toMatch(/streamed .* in [\d.]+ s/);
    expect(r.code).toBe(0);
    const i = cli(['restore', '--import', file, '--into', String(app.pid)], { TMPDIR: tmp });
    expect(i.code).toBe(0);
    expect(sameBuffers((await app.command('state')).buffers, mutated)).toBe(true);
    // Standard input as a file (`< FILE`) and as node's pipe to a child (a socket).
    for (const how of ['file', 'socket']) {
      await app.command('mutate');
      const args = ['restore', '-', '--into', String(app.pid)];
      const opts = { env: box.env({ ...env, TMPDIR: tmp }), encoding: 'utf8' as const, timeout: 60_000 };
      const r = how === 'file' ? spawnSync('bash', ['-c', `"$0" "$@" <'${file}'`, BIN, ...args], opts) : spawnSync(BIN, args, { ...opts, input: readFileSync(file) });
      expect(r.stderr, how).toMatch(/streamed .* in [\d.]+ s/);
      expect(r.status, how).toBe(0);
      expect(sameBuffers((await app.command('state')).buffers, mutated), how).toBe(true);
    }
    expect(readdirSync(tmp)).toEqual([]);
    expect(readdirSync(box.dir).filter((n) => n.includes('gpuckpt-tmp'))).toEqual([]);
  });

  it('a stream whose reader goes away: the completed checkpoint keeps its image, and says where', async () => {
    const { app, ready } = await start();
    const tmp = passing('reader-gone');
    const q = (a: string[]) => [BIN, ...a].map((w) => `'${w}'`).join(' ');
    const r = spawnSync('bash', ['-c', `${q(['checkpoint', String(app.pid), '--gpu-only', '-o', '-'])} | head -c 100 >/dev/null; exit \${PIPESTATUS[0]}`], { env: box.env({ ...env, TMPDIR: tmp }), encoding: 'utf8', timeout: 60_000 });
    expect(r.status).toBe(1);
    const kept = new RegExp(`^gpuckpt: cannot stream the image: .*EPIPE.*; the checkpoint itself completed and its image is kept at (${tmp}/gpuckpt-image-\\d+-\\d+): gpuckpt restore \\1, or copy it where it is needed\n$`).exec(r.stderr);
    expect(kept, r.stderr).not.toBeNull();
    await app.command('mutate');
    expect(cli(['restore', kept![1]!, '--into', String(app.pid)]).code).toBe(0);
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
  });

  it('a checkpoint that fails while it streams: the stream stops short, the receiver refuses it, the process runs on', async () => {
    const { app } = await start();
    const tmp = passing('failed');
    const before = (await app.command('mutate')).buffers;
    const q = (a: string[]) => [BIN, ...a].map((w) => `'${w}'`).join(' ');
    const pid = String(app.pid);
    const r = spawnSync('bash', ['-c', `GPUCKPT_TEST_FAULT=image-write ${q(['checkpoint', pid, '--gpu-only', '-o', '-'])} | ${q(['restore', '-', '--into', pid])}; echo "\${PIPESTATUS[*]}"`], {
      env: box.env({ ...env, TMPDIR: tmp }),
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(r.stdout.trim()).toBe('1 3');
    expect(r.stderr).toMatch(/^gpuckpt: injected fault at image-write/m);
    expect(r.stderr).toMatch(/^gpuckpt: image stream is truncated: it ends \d+ bytes in, inside /m);
    expect(sameBuffers((await app.command('state')).buffers, before)).toBe(true);
    expect(readdirSync(tmp)).toEqual([]);
    // The sender's process went with the checkpoint (other tests' senders have another TMPDIR).
    const senders = spawnSync('pgrep', ['-f', 'stream-sender.js']).stdout.toString().split('\n').filter(Boolean);
    const ours = senders.filter((p) => {
      try {
        return readFileSync(`/proc/${p}/environ`, 'utf8').split('\0').includes(`TMPDIR=${tmp}`);
      } catch {
        return false; // gone meanwhile
      }
    });
    expect(ours).toEqual([]);
  });

  it('a damaged or cut stream is refused in one line before anything is restored', async () => {
    const { app } = await start();
    const tmp = passing('damaged');
    const file = box.path('d.gpuckpt');
    expect(cli(['checkpoint', String(app.pid), '--gpu-only', '--export', file]).code).toBe(0);
    const good = readFileSync(file);
    const before = (await app.command('mutate')).buffers;
    const bad = Buffer.from(good);
    bad[bad.length >> 1] ^= 0x40;
    writeFileSync(file, bad);
    const d = cli(['restore', '--import', file, '--into', String(app.pid)], { TMPDIR: tmp });
    expect(d.code).toBe(3);
    expect(d.stderr).toMatch(/^gpuckpt: image data is corrupt: the stream's record at byte \d+ \(pool\.zst\) fails its CRC-32\n$/);
    writeFileSync(file, good);
    truncateSync(file, statSync(file).size - 10);
    const t = cli(['restore', '--import', file, '--into', String(app.pid)], { TMPDIR: tmp });
    expect(t.code).toBe(3);
    expect(t.stderr).toMatch(/^gpuckpt: image stream is truncated: it ends \d+ bytes in, inside the record at byte \d+\n$/);
    oneLine(t.stderr);
    const n = spawnSync(BIN, ['restore', '-', '--into', String(app.pid)], { env: box.env({ ...env, TMPDIR: tmp }), encoding: 'utf8', input: 'not an image stream, whatever it is' });
    expect(n.status).toBe(2);
    expect(n.stderr).toMatch(/^gpuckpt: not a gpuckpt image stream/);
    expect(sameBuffers((await app.command('state')).buffers, before)).toBe(true);
    expect(readdirSync(tmp)).toEqual([]);
  });

  it('a whole-process image by --export and --import: CRIU gets its pages as dumped', async () => {
    const { app } = await start();
    const tmp = passing('whole');
    const file = box.path('w.gpuckpt');
    const c = cli(['checkpoint', String(app.pid), '--export', file, '--json'], { TMPDIR: tmp });
    expect(c.stderr).toBe('');
    expect(json(c.stdout)).toMatchObject({ pid: app.pid, leftRunning: false, stream: { to: file } });
    app.child.kill('SIGKILL'); // the fake CRIU only stopped it
    while (app.child.exitCode === null && app.child.signalCode === null) await new Promise((res) => setTimeout(res, 20));
    // The fake CRIU checks the pages it reads before its injected failure.
    const r = cli(['restore', '--import', file, '--detach'], { TMPDIR: tmp, FAKE_CRIU_FAIL: 'restore' });
    expect(r.stderr).toMatch(/^gpuckpt: criu restore of .* failed: .*injected restore failure/);
    expect(readdirSync(tmp)).toEqual([]);
    expect(readdirSync(box.dir).filter((n) => n.includes('gpuckpt-tmp'))).toEqual([]);
  });

  it('refuses what cannot be streamed before touching the process', async () => {
    const { app } = await start();
    const file = box.path('x.gpuckpt');
    for (const [args, pattern] of [
      [['--gpu-only', '-o', box.path('x'), '--export', file], /^gpuckpt: -o and --export both say where the image goes: give one\n$/],
      [['--gpu-only', '-o', '-', '--json'], /^gpuckpt: --json prints on standard output, where -o - streams the image/],
      [['--gpu-only', '--export', file, '--parent', box.path('p')], /^gpuckpt: --parent makes an image that needs its parent beside it/],
      [['--gpu-only', '--export', file, '--raw-criu-pages'], /^gpuckpt: --raw-criu-pages is for whole-process images; a --gpu-only image holds no CRIU files\n$/],
    ] as const) {
      const r = cli(['checkpoint', String(app.pid), ...args]);
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(pattern);
      expect(existsSync(file)).toBe(false);
    }
    // Refused before its first frame: nothing at all on standard output.
    const early = cli(['checkpoint', '999999', '--gpu-only', '-o', '-']);
    expect(early.code).toBe(2);
    expect(early.stdout).toBe('');
    writeFileSync(file, 'keep me');
    const taken = cli(['checkpoint', String(app.pid), '--gpu-only', '--export', file]);
    expect(taken.code).toBe(2);
    expect(taken.stderr).toMatch(/exists: not replacing it \(--force replaces it\)/);
    expect(readFileSync(file, 'utf8')).toBe('keep me');
    expect(cli(['restore']).stderr).toMatch(/^gpuckpt: no image: give its directory, - for a stream on standard input, or --import FILE\n$/);
  });
});
