/**
 * The framework hook end to end: a Python program under `gpuckpt run`, the
 * shim and the fake driver, whose stand-in for PyTorch's caching allocator
 * (test/apps/framework_app.py) holds 4 MiB of its 8 MiB segment unused.
 * Images leave that out and a restore leaves it as it is; a hook that does
 * not answer, --whole-pool and --no-framework-hook take the whole pool; a
 * child image stores what its parent left out; the user's own
 * sitecustomize still runs.
 */
import { describe, expect, it } from 'vitest';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { AppDriver } from '../controller/adapters/app-driver.js';
import { BIN, checkpointingSandbox, json, ROOT } from './helpers/e2e.js';

const { box, env } = checkpointingSandbox();
const APP = join(ROOT, 'test', 'apps', 'framework_app.py');
const MiB = 2 ** 20;
const ok = (args: string[], extra: Record<string, string> = {}) => {
  const r = box.cli(args, { ...env, ...extra });
  if (r.code !== 0) throw new Error(`gpuckpt ${args.join(' ')}: ${r.stderr.trim()}`);
  return r;
};

async function start(runArgs: string[] = [], extra: Record<string, string> = {}) {
  const app = new AppDriver(BIN, ['run', ...runArgs, '--', 'python3', APP], box.env({ ...env, ...extra }));
  box.apps.push(app);
  const ready = await app.next(30_000);
  if (ready.event !== 'ready') throw new Error(`app did not start: ${JSON.stringify(ready)} ${app.stderr}`);
  return { app, pid: String(app.pid), ready };
}

describe('framework hook', () => {
  it('leaves out what the allocator holds unused; a restore leaves it as it is', async () => {
    const { app, pid } = await start();
    const before = await app.command('state');
    const A = box.path('A');
    const s = json(ok(['checkpoint', pid, '--gpu-only', '-o', A, '--json']).stdout);
    expect(s.framework.name).toBe('PyTorch');
    expect(s.framework.unusedBytes).toBe(4 * MiB);
    expect(s.framework.wholePoolBecause).toBeUndefined();
    expect(s.poolBytes).toBe(8 * MiB);
    expect(s.rawBytes).toBe(4 * MiB);
    expect(Object.keys(s.pausePhases)).toContain('framework');
    const inspect = json(ok(['inspect', A, '--json']).stdout);
    expect(inspect.verified).toBe(true);
    expect(inspect.unused).toHaveLength(1);
    expect(ok(['checkpoint', pid, '--gpu-only', '-o', box.path('A-text')]).stdout).toMatch(/PyTorch: 4\.00 MiB its allocator holds unused left out/);

    await app.command('mutate');
    const after = await app.command('state');
    expect(after.active).not.toBe(before.active);
    ok(['restore', A, '--into', pid]);
    const back = await app.command('state');
    expect(back.active).toBe(before.active);
    expect(back.free).toBe(after.free);
  });

  it('a child image stores what its parent left out once it is used', async () => {
    const { app, pid } = await start();
    const P = box.path('P');
    ok(['checkpoint', pid, '--gpu-only', '-o', P]);
    // Used now, its bytes unchanged: the parent's digests match, its data is not in the parent.
    await app.command('use');
    const used = await app.command('state');
    const C = box.path('C');
    const c = json(ok(['checkpoint', pid, '--gpu-only', '-o', C, '--parent', P, '--json']).stdout);
    expect(c.rawBytes).toBe(4 * MiB);
    expect(c.framework.unusedBytes).toBe(0);
    await app.command('mutate');
    ok(['restore', C, '--into', pid]);
    const back = await app.command('state');
    expect(back).toEqual(used);
  });

  it('a hook that does not answer in time: the whole pool, and why', async () => {
    const { app, pid } = await start();
    await app.command('hang');
    const s = json(ok(['checkpoint', pid, '--gpu-only', '-o', box.path('H'), '--json'], { GPUCKPT_FRAMEWORK_WAIT: '0.2' }).stdout);
    expect(s.rawBytes).toBe(8 * MiB);
    expect(s.framework.wholePoolBecause).toMatch(/did not finish in 200 ms/);
    expect(json(ok(['inspect', box.path('H'), '--json']).stdout).unused).toBeUndefined();
  });

  it('--whole-pool, and run --no-framework-hook, take every byte', async () => {
    const { pid } = await start();
    const w = json(ok(['checkpoint', pid, '--gpu-only', '-o', box.path('W'), '--whole-pool', '--json']).stdout);
    expect(w.rawBytes).toBe(8 * MiB);
    expect(w.framework).toBeUndefined();
    const off = await start(['--no-framework-hook']);
    const n = json(ok(['checkpoint', off.pid, '--gpu-only', '-o', box.path('N'), '--json']).stdout);
    expect(n.rawBytes).toBe(8 * MiB);
    expect(n.framework).toBeUndefined();
  });

  it("runs the user's own sitecustomize too", async () => {
    const dir = box.path('user-site');
    mkdirSync(dir);
    writeFileSync(join(dir, 'sitecustomize.py'), 'import builtins\nbuiltins.user_sitecustomize_ran = True\n');
    const { ready } = await start([], { PYTHONPATH: dir });
    expect(ready.userSitecustomize).toBe(true);
  });

  it('a bad GPUCKPT_FRAMEWORK_WAIT is refused in one line', () => {
    const r = box.cli(['checkpoint', '1', '--gpu-only', '-o', box.path('X')], { ...env, GPUCKPT_FRAMEWORK_WAIT: 'soon' });
    expect(r.code).not.toBe(0);
    expect(r.stderr.trim()).toMatch(/^gpuckpt: GPUCKPT_FRAMEWORK_WAIT="soon" must be a number of seconds above 0$/);
  });
});
