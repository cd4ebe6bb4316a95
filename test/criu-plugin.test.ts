/**
 * The CRIU plugin (native/criu-plugin/) end to end on the fake driver and
 * the fake CRIU, which loads the plugins of -L DIR and calls their hooks in
 * CRIU's order (test/fake-criu/plugin_host.c): plain `criu dump` of a
 * process under the shim leaves its GPU free with its pool in gpuckpt's
 * image among CRIU's files, `criu restore` brings the pool back at its
 * addresses, a dump with --leave-running resumes it, a restore without the
 * plugin is refused, and a process not under gpuckpt is left to CRIU.
 */
import { describe, expect, it } from 'vitest';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { sameBuffers, type BufferState } from '../controller/adapters/app-driver.js';
import { APPS, checkpointingSandbox, eventually, json, ROOT } from './helpers/e2e.js';

const { box, env } = checkpointingSandbox();
const CRIU = join(ROOT, 'test', 'fake-criu', 'criu');
const PLUGINS = join(ROOT, 'build', 'criu');

function criu(args: string[]): { code: number | null; log: string } {
  const r = spawnSync(CRIU, args, { env: box.env(env), encoding: 'utf8', timeout: 60_000 });
  const dir = args[args.indexOf('-D') + 1]!;
  const log = ['dump.log', 'restore.log'].map((f) => (existsSync(join(dir, f)) ? readFileSync(join(dir, f), 'utf8') : '')).join('');
  return { code: r.status, log: log + r.stderr };
}

const poolState = (pid: number) => (json(box.cli(['ps', '--json'], env).stdout) as { pid: number; poolState: string }[]).find((r) => r.pid === pid)?.poolState;
const state = (pid: number) => readFileSync(`/proc/${pid}/status`, 'utf8').match(/^State:\s+(\S)/m)?.[1];

describe('CRIU with the gpuckpt plugin', () => {
  it('criu dump frees the GPU into an image among its files; criu restore brings the pool back', async () => {
    const { app, ready } = await box.start(APPS.linked, { env });
    const R = ready.buffers as BufferState[];
    const dir = box.path('criu-images');
    mkdirSync(dir);
    const dump = criu(['dump', '-t', String(app.pid), '-D', dir, '-L', PLUGINS, '--shell-job']);
    expect(dump.code, dump.log).toBe(0);
    expect(existsSync(join(dir, `gpuckpt-pool-${app.pid}`, 'manifest'))).toBe(true);
    expect(readFileSync(join(dir, 'fake-criu-plugins'), 'utf8')).toBe('gpuckpt\n');
    // Stopped as CRIU leaves it (the real one ends it): suspended first, the GPU free.
    expect(state(app.pid)).toBe('T');
    expect(dump.log).toMatch(new RegExp(`process ${app.pid}: GPU pool saved in the images directory, GPU free`));

    // Without the plugin the image cannot be restored: refused, as CRIU does.
    const refused = criu(['restore', '-D', dir, '--shell-job']);
    expect(refused.code).not.toBe(0);
    expect(refused.log).toMatch(/Missing required plugin: gpuckpt/);

    const restore = criu(['restore', '-D', dir, '-L', PLUGINS, '--shell-job']);
    expect(restore.code, restore.log).toBe(0);
    expect(await eventually(() => poolState(app.pid) === 'active')).toBe(true);
    expect(sameBuffers((await app.command('state')).buffers as BufferState[], R)).toBe(true);
  });

  it('criu dump --leave-running: the process runs on with its pool', async () => {
    const { app } = await box.start(APPS.linked, { env });
    const M = (await app.command('mutate')).buffers as BufferState[];
    const dir = box.path('criu-leave');
    mkdirSync(dir);
    const dump = criu(['dump', '-t', String(app.pid), '-D', dir, '-L', PLUGINS, '--shell-job', '--leave-running']);
    expect(dump.code, dump.log).toBe(0);
    expect(await eventually(() => poolState(app.pid) === 'active')).toBe(true);
    expect(sameBuffers((await app.command('state')).buffers as BufferState[], M)).toBe(true);
  });

  it('a dump that fails after the pause: the process is resumed with its pool', async () => {
    const { app, ready } = await box.start(APPS.linked, { env });
    const dir = box.path('criu-late');
    mkdirSync(dir);
    const r = spawnSync(CRIU, ['dump', '-t', String(app.pid), '-D', dir, '-L', PLUGINS, '--shell-job'], { env: box.env({ ...env, FAKE_CRIU_FAIL: 'dump-late' }), encoding: 'utf8' });
    expect(r.status).not.toBe(0);
    expect(await eventually(() => poolState(app.pid) === 'active')).toBe(true);
    expect(sameBuffers((await app.command('state')).buffers as BufferState[], ready.buffers as BufferState[])).toBe(true);
  });

  it('a restored process whose pool image is not among the images: its restore step fails, naming what is missing', async () => {
    // As podman left it when the image was named by the PID a container's process had before its restore.
    const { app, ready } = await box.start(APPS.linked, { env });
    expect(box.cli(['suspend', String(app.pid)], env).code).toBe(0);
    const empty = box.path('criu-empty');
    mkdirSync(empty);
    const r = box.cli(['__criu-plugin', 'restore', String(app.pid), empty], env);
    expect(r.code).toBe(1);
    expect(r.stdout.trim()).toBe(`cannot load the pool of process ${app.pid}: ${join(empty, `gpuckpt-pool-${app.pid}`)} is missing (CRIU's images hold no pool image for it)`);
    // The plugin ends such a process; here it is resumed as gpuckpt left it.
    expect(box.cli(['resume', String(app.pid)], env).code).toBe(0);
    expect(sameBuffers((await app.command('state')).buffers as BufferState[], ready.buffers as BufferState[])).toBe(true);
  });

  it('leaves a process not under gpuckpt to CRIU', async () => {
    const other = spawn('sleep', ['30'], { stdio: 'ignore', detached: true });
    try {
      const dir = box.path('criu-other');
      mkdirSync(dir);
      const dump = criu(['dump', '-t', String(other.pid), '-D', dir, '-L', PLUGINS, '--leave-running']);
      expect(dump.code, dump.log).toBe(0);
      expect(existsSync(join(dir, `gpuckpt-pool-${other.pid}`))).toBe(false);
      expect(existsSync(join(dir, 'fake-criu-plugins'))).toBe(false);
    } finally {
      other.kill('SIGKILL');
    }
  });
});
