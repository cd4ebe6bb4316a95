/**
 * Soak and load against the fake driver, with real processes.
 *
 * Soak: SOAK_CYCLES cycles (default 10 in CI; 200 on demand, recorded in
 * docs/RELIABILITY.md) on one running application, each mixing a GPU-only
 * checkpoint, a rollback, a suspend/resume and a whole-process checkpoint
 * --leave-running (fake CRIU), the data verified after every step. (The
 * fake CRIU cannot bring a dumped process back; whole-process restores
 * soak on GPU hosts.) Between the first and the
 * last cycle the application's open files, pool memory (mapped and in use)
 * and resident memory must not grow.
 *
 * Load: 16 threads in the application allocating, launching, copying and
 * freeing (each verifying its own data) while LOAD_CHECKPOINTS checkpoints run back to
 * back: no deadlock, no error, no allocation lost or left behind. (A
 * rollback needs the image's allocations exactly, so it is refused while
 * the threads allocate: that refusal is tested in bad-input.)
 */
import { describe, expect, it } from 'vitest';
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import { sameBuffers, type BufferState } from '../controller/adapters/app-driver.js';
import { APPS, checkpointingSandbox, json } from './helpers/e2e.js';

const CYCLES = Number(process.env.SOAK_CYCLES ?? 10);
/** Checkpoints under load (default 3 in CI; 10 on demand, recorded). */
const LOAD_CHECKPOINTS = Number(process.env.LOAD_CHECKPOINTS ?? 3);
/** Resident memory may move by allocator noise, not by what a cycle keeps. */
const RSS_SLACK_KIB = 8 * 1024;

const { box, env } = checkpointingSandbox();

const cli = (args: string[]) => {
  const r = box.cli(args, env);
  if (r.code !== 0) throw new Error(`gpuckpt ${args.join(' ')}: ${r.stderr.trim()}`);
  return r;
};
type Row = { pid: number; poolState: string; gate: string; devices: { bytesInUse: string; bytesMapped: string; allocations: number }[] };
const psRow = (pid: number) => json<Row[]>(cli(['ps', '--json']).stdout).find((r) => r.pid === pid)!;

/** What the application holds: open files, pool memory, resident memory. */
function footprint(pid: number) {
  const row = psRow(pid);
  const rss = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN);
  return {
    fds: readdirSync(`/proc/${pid}/fd`).length,
    bytesMapped: row.devices.map((d) => String(d.bytesMapped)).join(','),
    bytesInUse: row.devices.map((d) => String(d.bytesInUse)).join(','),
    allocations: row.devices.reduce((s, d) => s + d.allocations, 0),
    rssKiB: rss,
  };
}

describe('soak', () => {
  it(`${CYCLES} cycles of checkpoint, rollback, suspend/resume and whole-process checkpoint --leave-running: data verified, nothing grows`, async () => {
    const { app, ready } = await box.start(APPS.linked, { env: { ...env, FAKE_CUDA_CKPT_BLOCK: '1' } });
    const pid = app.pid;
    const R = ready.buffers as BufferState[];
    const check = async (what: string, want: BufferState[]) => {
      const now = (await app.command('state')).buffers;
      if (!sameBuffers(now, want)) throw new Error(`cycle data mismatch ${what}`);
    };
    let first: ReturnType<typeof footprint> | undefined;
    for (let i = 0; i < CYCLES; i++) {
      const snap = box.path(`soak-${i}`);
      cli(['checkpoint', String(pid), '--gpu-only', '-o', snap]);
      await check(`${i}: after checkpoint`, R);
      await app.command('mutate');
      cli(['restore', snap, '--into', String(pid)]);
      await check(`${i}: after rollback`, R);
      rmSync(snap, { recursive: true });
      cli(['suspend', String(pid)]);
      cli(['resume', String(pid)]);
      await check(`${i}: after suspend/resume`, R);
      const whole = box.path(`soak-whole-${i}`);
      cli(['checkpoint', String(pid), '-o', whole, '--leave-running']);
      await check(`${i}: after checkpoint --leave-running`, R);
      rmSync(whole, { recursive: true });
      if (i === 0) first = footprint(pid);
    }
    const last = footprint(pid);
    console.log(`soak: ${CYCLES} cycles, 0 mismatches (${4 * CYCLES} verifications); first ${JSON.stringify(first)}, last ${JSON.stringify(last)}`);
    expect(last.fds).toBe(first!.fds);
    expect(last.bytesMapped).toBe(first!.bytesMapped);
    expect(last.bytesInUse).toBe(first!.bytesInUse);
    expect(last.allocations).toBe(first!.allocations);
    expect(last.rssKiB).toBeLessThanOrEqual(first!.rssKiB + RSS_SLACK_KIB);
    expect(psRow(pid)).toMatchObject({ poolState: 'active', gate: 'open' });
  }, Math.max(300_000, CYCLES * 10_000));
});

describe('load', () => {
  it(`16 threads allocating, launching and freeing while ${LOAD_CHECKPOINTS} checkpoints run back to back`, async () => {
    const { app, ready } = await box.start(APPS.linked, { env });
    const before = footprint(app.pid);
    const started = await app.command('threads 16');
    expect(started.event).not.toBe('error');
    for (let i = 0; i < LOAD_CHECKPOINTS; i++) {
      const out = box.path(`load-${i}`);
      cli(['checkpoint', String(app.pid), '--gpu-only', '-o', out]);
      expect(json(cli(['inspect', out, '--json']).stdout).verified).toBe(true);
      rmSync(out, { recursive: true });
    }
    const stopped = await app.command('stop');
    expect(stopped.errors).toBe(0);
    expect(stopped.iterations as number).toBeGreaterThan(0);
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
    // The threads' allocations are all gone again: none lost, none left.
    const after = footprint(app.pid);
    expect(after.allocations).toBe(before.allocations);
    expect(after.bytesInUse).toBe(before.bytesInUse);
  }, 300_000);
});
