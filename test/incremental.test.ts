/**
 * Incremental images (checkpoint --parent) end to end on the fake driver,
 * whose digest "kernel" computes the shim's GPU kernel's function on the
 * CPU: only changed blocks are stored, restore follows the chain bit for
 * bit, inspect shows it, and a broken chain is refused in one line before
 * the process is touched.
 */
import { describe, expect, it } from 'vitest';
import { renameSync, rmSync } from 'node:fs';
import { sameBuffers, type BufferState } from '../controller/adapters/app-driver.js';
import { APPS, checkpointingSandbox, json } from './helpers/e2e.js';

const { box, env } = checkpointingSandbox();
const cli = (args: string[]) => box.cli(args, env);
const ok = (args: string[]) => {
  const r = cli(args);
  if (r.code !== 0) throw new Error(`gpuckpt ${args.join(' ')}: ${r.stderr.trim()}`);
  return r;
};
const MiB = 2 ** 20;

describe('checkpoint --parent', () => {
  it('stores only changed blocks, restores through a chain of two, and shows the chain', async () => {
    const { app, ready } = await box.start(APPS.linked, { env });
    const pid = String(app.pid);
    const R = ready.buffers as BufferState[];
    const A = box.path('A');
    const full = json(ok(['checkpoint', pid, '--gpu-only', '-o', A, '--json']).stdout);
    expect(json(ok(['inspect', A, '--json']).stdout).blocks.count).toBeGreaterThan(0);

    const T1 = (await app.command('touch 10')).buffers as BufferState[];
    expect(sameBuffers(T1, R)).toBe(false);
    const B = box.path('B');
    const inc = json(ok(['checkpoint', pid, '--gpu-only', '-o', B, '--parent', A, '--json']).stdout);
    expect(inc.parent).toBe(A);
    expect(inc.poolBytes).toBe(full.rawBytes);
    // 10 % of 1 MiB, 3 MiB, 40 MiB and 4 KiB buffers touches one 256 KiB block
    // of the 1 MiB one, two of the 3 MiB one, sixteen of the 40 MiB one and
    // the 4 KiB one: 256 KiB + 512 KiB + 4 MiB + 4 KiB.
    expect(inc.rawBytes).toBe(MiB / 4 + MiB / 2 + 4 * MiB + 4096);
    expect(inc.storedBytes).toBeLessThan(full.storedBytes / 4);
    // Where a fixed cost would come from: every step of setup and of the pause.
    // Staging prepared before the pause, as for a full image: the pause is never the longer one.
    expect(Object.keys(inc.setupPhases)).toEqual(['status', 'parent', 'writer', 'staging', 'workers', 'kernel']);
    expect(Object.keys(inc.pausePhases)).toEqual(['quiesce', 'allocations', 'framework', 'digest', 'plan', 'staging', 'copy', 'release']);
    expect(Object.keys(inc.commitPhases)).toEqual(['appends', 'sync', 'directory', 'install']);
    // When the bytes went to the file: the first write within the command, what the pause had written within the image.
    expect(inc.writes.firstSeconds).toBeGreaterThan(0);
    expect(inc.writes.firstSeconds).toBeLessThanOrEqual(inc.seconds);
    expect(inc.writes.atPauseEndBytes).toBeGreaterThanOrEqual(0);
    expect(inc.writes.atPauseEndBytes).toBeLessThanOrEqual(inc.storedBytes);

    const T2 = (await app.command('touch 50')).buffers as BufferState[];
    const C = box.path('C');
    ok(['checkpoint', pid, '--gpu-only', '-o', C, '--parent', B]);
    // Nothing changed since C: an image of no data at all.
    const D = box.path('D');
    expect(json(ok(['checkpoint', pid, '--gpu-only', '-o', D, '--parent', C, '--json']).stdout).rawBytes).toBe(0);

    await app.command('mutate');
    ok(['restore', D, '--into', pid]);
    expect(sameBuffers((await app.command('state')).buffers, T2)).toBe(true);
    await app.command('mutate');
    ok(['restore', C, '--into', pid]);
    expect(sameBuffers((await app.command('state')).buffers, T2)).toBe(true);
    ok(['restore', B, '--into', pid]);
    expect(sameBuffers((await app.command('state')).buffers, T1)).toBe(true);
    ok(['restore', A, '--into', pid]);
    expect(sameBuffers((await app.command('state')).buffers, R)).toBe(true);

    const shown = json(ok(['inspect', C, '--json']).stdout);
    expect(shown.verified).toBe(true);
    expect(shown.parent.path).toBe(B);
    expect(shown.chain.map((c: { image: string }) => c.image)).toEqual([B, A]);
    expect(ok(['inspect', C]).stdout).toMatch(new RegExp(`parent +${B}\\n(.|\\n)*chain 2 +${A}`));
    expect(await app.quit()).toBe(0);
  });

  it('leaves all-zero blocks out of full and incremental images, and zeroes them again on restore', async () => {
    // Memory the driver hands out anew (the pool's, at a resume) is not zeros.
    const { app } = await box.start(APPS.linked, { env: { ...env, FAKE_CUDA_DIRTY_MEMORY: '1' } });
    const pid = String(app.pid);
    const A = box.path('zA');
    const full = json(ok(['checkpoint', pid, '--gpu-only', '-o', A, '--json']).stdout);
    expect(full.zeroBytes).toBe(0);
    // Half of each buffer zeroed: whole 256 KiB blocks of the 1 MiB one
    // (2), the 3 MiB + 512 one (6) and the 40 MiB one (80); none of 4 KiB.
    // Images leave out runs of 2 MiB or more: the 40 MiB one's 20 MiB.
    const Z = (await app.command('zero 50')).buffers as BufferState[];
    const zeros = 80 * (MiB / 4);
    const B = box.path('zB');
    const inc = json(ok(['checkpoint', pid, '--gpu-only', '-o', B, '--parent', A, '--json']).stdout);
    expect(inc.zeroBytes).toBe(zeros);
    // Changed, not left out: the short zero runs (2 and 6 blocks), the
    // 3 MiB one's partly zeroed block and the 4 KiB buffer.
    expect(inc.rawBytes).toBe(MiB / 2 + 7 * (MiB / 4) + 4096);
    const C = box.path('zC');
    const whole = json(ok(['checkpoint', pid, '--gpu-only', '-o', C, '--json']).stdout);
    expect(whole).toMatchObject({ zeroBytes: zeros, rawBytes: whole.poolBytes - zeros });
    expect(ok(['inspect', C]).stdout).toMatch(/22\.0 MiB all zeros/);
    expect(json(ok(['inspect', C, '--json']).stdout).verified).toBe(true);

    for (const image of [B, C]) {
      await app.command('mutate');
      ok(['restore', image, '--into', pid]);
      expect(sameBuffers((await app.command('state')).buffers, Z)).toBe(true);
    }
    expect(await app.quit()).toBe(0);
  });

  it('a whole-process image --parent: the process resumes through the chain (--leave-running, fake CRIU)', async () => {
    const { app } = await box.start(APPS.linked, { env: { ...env, FAKE_CUDA_CKPT_BLOCK: '1' } });
    const pid = String(app.pid);
    const P1 = box.path('P1');
    const P2 = box.path('P2');
    ok(['checkpoint', pid, '-o', P1, '--leave-running']);
    const T = (await app.command('touch 30')).buffers as BufferState[];
    // The image failing: the process comes back whole (staging held only
    // the changes, so it must not be what the pool is restored from).
    const failed = box.cli(['checkpoint', pid, '-o', P2, '--parent', P1], { ...env, GPUCKPT_TEST_FAULT: 'image-write' });
    expect(failed.code).toBe(1);
    expect(failed.stderr.trimEnd().split('\n')).toHaveLength(1);
    expect(sameBuffers((await app.command('state')).buffers, T)).toBe(true);
    ok(['checkpoint', pid, '-o', P2, '--parent', P1, '--leave-running']);
    // The pool went back from P2 and P1 together: staging held only the changes.
    expect(sameBuffers((await app.command('state')).buffers, T)).toBe(true);
    const shown = json(ok(['inspect', P2, '--json']).stdout);
    expect(shown.kind).toBe('process');
    expect(shown.chain.map((c: { image: string }) => c.image)).toEqual([P1]);
    expect(await app.quit()).toBe(0);
  });

  it('a broken chain is refused in one line before the process is touched', async () => {
    const { app } = await box.start(APPS.linked, { env });
    const pid = String(app.pid);
    const A = box.path('bA');
    const B = box.path('bB');
    ok(['checkpoint', pid, '--gpu-only', '-o', A]);
    await app.command('touch 20');
    ok(['checkpoint', pid, '--gpu-only', '-o', B, '--parent', A]);
    const M = (await app.command('mutate')).buffers as BufferState[];

    const refused = (pattern: RegExp) => {
      const r = cli(['restore', B, '--into', pid]);
      expect(r.code).toBe(3);
      expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(pattern);
    };
    renameSync(A, `${A}.moved`);
    refused(/cannot be restored: .* was made against .*bA, which is missing/);
    const inspected = cli(['inspect', B, '--json']);
    expect(json(inspected.stdout).verified).toBe(false);
    expect(json(inspected.stdout).problem).toMatch(/which is missing/);
    renameSync(`${A}.moved`, A);
    // The parent replaced by another image at the same path.
    ok(['checkpoint', pid, '--gpu-only', '-o', A, '--force']);
    refused(/which has been replaced since/);
    expect(sameBuffers((await app.command('state')).buffers, M)).toBe(true);

    // A parent that cannot be one: missing, or the output itself.
    const noParent = cli(['checkpoint', pid, '--gpu-only', '-o', box.path('bX'), '--parent', box.path('nothing')]);
    expect(noParent.code).toBe(2);
    expect(noParent.stderr.trimEnd().split('\n')).toHaveLength(1);
    const self = cli(['checkpoint', pid, '--gpu-only', '-o', A, '--force', '--parent', A]);
    expect(self.code).toBe(2);
    expect(self.stderr).toMatch(/which the new image needs as its parent/);
    rmSync(box.path('bX'), { recursive: true, force: true });
    expect(sameBuffers((await app.command('state')).buffers, M)).toBe(true);
    expect(await app.quit()).toBe(0);
  });
});
