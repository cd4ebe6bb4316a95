/**
 * checkpoint --live end to end on the fake driver. Its memory is host
 * memory, written by the application's threads while the shim's control
 * thread copies it, so torn copies happen for real. Its digest "kernel"
 * computes the shim's function, and the controller's workers compute it too,
 * over what they copied. Checked here:
 * - a still pool needs one round and nothing in the pause;
 * - a buffer rewritten whole all through the checkpoint comes back as one
 *   rewrite, whole;
 * - threads that allocate and free during the copy lose nothing;
 * - a whole-process image --live (the pool held in staging at fixed places);
 * - the refusals: no room in host memory, no digest kernel.
 */
import { describe, expect, it } from 'vitest';
import { existsSync } from 'node:fs';
import { sameBuffers, type BufferState } from '../controller/adapters/app-driver.js';
import { APPS, checkpointingSandbox, json } from './helpers/e2e.js';

const { box, env } = checkpointingSandbox();
const cli = (args: string[], extra: Record<string, string> = {}) => box.cli(args, { ...env, ...extra });
const ok = (args: string[]) => {
  const r = cli(args);
  if (r.code !== 0) throw new Error(`gpuckpt ${args.join(' ')}: ${r.stderr.trim()}`);
  return r;
};

describe('checkpoint --live', () => {
  it('a still pool: one round while running, nothing left for the pause, restores bit for bit', async () => {
    const { app, ready } = await box.start(APPS.linked, { env });
    const pid = String(app.pid);
    const R = ready.buffers as BufferState[];
    const img = box.path('still');
    const s = json(ok(['checkpoint', pid, '--gpu-only', '--live', '-o', img, '--json']).stdout);
    // Round 1 copied the pool; the digests of round 2 found every block as copied.
    expect(s.live.rounds.length).toBe(1);
    expect(s.live.rounds[0].bytes).toBe(s.poolBytes);
    expect(s.live.pauseBytes).toBe(0);
    expect(s.rawBytes).toBe(s.poolBytes);
    expect(s.phases.precopy).toBeGreaterThan(0);
    expect(ok(['checkpoint', pid, '--gpu-only', '--live', '-o', box.path('still-text')]).stdout).toMatch(/live: 1 round\(s\) while running \(.*\); 0 B copied in the pause/);

    await app.command('mutate');
    ok(['restore', img, '--into', pid]);
    expect(sameBuffers((await app.command('state')).buffers, R)).toBe(true);
    expect(json(ok(['inspect', img, '--json']).stdout).verified).toBe(true);
    expect(await app.quit()).toBe(0);
  });

  it('a buffer rewritten all through the copy comes back as one rewrite, whole; the rest as it was', async () => {
    const { app, ready } = await box.start(APPS.linked, { env });
    const pid = String(app.pid);
    const R = ready.buffers as BufferState[];
    for (let i = 0; i < 3; i++) {
      expect((await app.command('rewrite')).started).toBe(true);
      const img = box.path(`rewritten-${i}`);
      const s = json(ok(['checkpoint', pid, '--gpu-only', '--live', '-o', img, '--json']).stdout);
      expect(s.live.rounds.length).toBeGreaterThanOrEqual(1);
      const after = await app.command('rewritten');
      expect(after.count).toBeGreaterThan(0);

      await app.command('mutate');
      ok(['restore', img, '--into', pid]);
      const back = await app.command('rewritten');
      // Some rewrite made before the pause, all of it.
      expect(back).toMatchObject({ whole: true });
      expect(back.holds).toBeGreaterThan(0);
      expect(back.holds).toBeLessThanOrEqual(after.count);
      const state = (await app.command('state')).buffers as BufferState[];
      expect(sameBuffers(state.filter((_, j) => j !== 2), R.filter((_, j) => j !== 2))).toBe(true);
    }
    expect(await app.quit()).toBe(0);
  });

  it('threads allocating, launching and freeing during the copy: no thread sees an error, every image verifies', async () => {
    const { app, ready } = await box.start(APPS.linked, { env });
    const pid = String(app.pid);
    const R = ready.buffers as BufferState[];
    await app.command('threads 4');
    for (let i = 0; i < 3; i++) {
      const img = box.path(`threads-${i}`);
      const s = json(ok(['checkpoint', pid, '--gpu-only', '--live', '-o', img, '--json']).stdout);
      // The threads' short-lived buffers were in the pool at the pause too.
      expect(s.allocations).toBeGreaterThanOrEqual(R.length);
      expect(json(ok(['inspect', img, '--json']).stdout).verified).toBe(true);
    }
    const stopped = await app.command('stop');
    expect(stopped.errors).toBe(0);
    expect(stopped.iterations).toBeGreaterThan(0);
    // (Those buffers are gone now, so the images no longer fit this process's layout.)
    expect(sameBuffers((await app.command('state')).buffers, R)).toBe(true);
    expect(await app.quit()).toBe(0);
  });

  it('--live --parent: only the changed blocks are stored, and the chain restores bit for bit', async () => {
    const { app } = await box.start(APPS.linked, { env });
    const pid = String(app.pid);
    const A = box.path('lp-A');
    const full = json(ok(['checkpoint', pid, '--gpu-only', '-o', A, '--json']).stdout);
    const T = (await app.command('touch 10')).buffers as BufferState[];
    const B = box.path('lp-B');
    const inc = json(ok(['checkpoint', pid, '--gpu-only', '--live', '--parent', A, '-o', B, '--json']).stdout);
    expect(inc.parent).toBe(A);
    expect(inc.rawBytes).toBeLessThan(full.rawBytes / 4);
    expect(inc.live.rounds[0].bytes).toBe(full.rawBytes); // the pre-copy takes the whole pool; the image keeps the changes
    await app.command('mutate');
    ok(['restore', B, '--into', pid]);
    expect(sameBuffers((await app.command('state')).buffers, T)).toBe(true);
    expect(await app.quit()).toBe(0);
  });

  it('a whole-process image --live: the pool comes back from host memory whole (--leave-running, fake CRIU); a failing write loses nothing', async () => {
    const { app, ready } = await box.start(APPS.linked, { env: { ...env, FAKE_CUDA_CKPT_BLOCK: '1' } });
    const pid = String(app.pid);
    const R = ready.buffers as BufferState[];
    const failed = cli(['checkpoint', pid, '--live', '-o', box.path('P0')], { GPUCKPT_TEST_FAULT: 'image-write' });
    expect(failed.code).toBe(1);
    expect(failed.stderr.trimEnd().split('\n')).toHaveLength(1);
    expect(sameBuffers((await app.command('state')).buffers, R)).toBe(true);
    const P = box.path('P');
    ok(['checkpoint', pid, '--live', '-o', P, '--leave-running']);
    expect(sameBuffers((await app.command('state')).buffers, R)).toBe(true);
    const shown = json(ok(['inspect', P, '--json']).stdout);
    expect(shown).toMatchObject({ kind: 'process', verified: true });
    expect(await app.quit()).toBe(0);
  });

  it('refuses in one line, with the application untouched: no host memory for the pool, no digest kernel', async () => {
    const { app, ready } = await box.start(APPS.linked, { env });
    const pid = String(app.pid);
    const R = ready.buffers as BufferState[];
    const small = box.path('small');
    const r = cli(['checkpoint', pid, '--gpu-only', '--live', '--staging', '8M', '-o', small]);
    expect(r.code).toBe(3);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/checkpoint --live of process \d+ needs host memory for its whole pool .* run it without --live/);
    expect(existsSync(small)).toBe(false);
    expect(sameBuffers((await app.command('state')).buffers, R)).toBe(true);
    expect(await app.quit()).toBe(0);

    // A driver that will not load the kernel: refused before any copy.
    const old = await box.start(APPS.linked, { env: { ...env, FAKE_CUDA_FAIL: 'cuModuleLoadData:1=218' } });
    const nk = box.path('no-kernel');
    const r2 = cli(['checkpoint', String(old.app.pid), '--gpu-only', '--live', '-o', nk]);
    expect(r2.code).toBe(3);
    expect(r2.stderr).toMatch(/^gpuckpt: process \d+: the driver will not run the digest kernel .* checkpoint --live cannot tell what changed\n$/);
    expect(existsSync(nk)).toBe(false);
    expect(sameBuffers((await old.app.command('state')).buffers, old.ready.buffers as BufferState[])).toBe(true);
    expect(await old.app.quit()).toBe(0);
  });
});
