/**
 * The controller SIGKILLed at random points of checkpoints and rollbacks
 * (restore --into), KILL_ROUNDS times each (default 30 + 30): the
 * application must answer again within the bound the lease sets, with its
 * data whole. A checkpoint leaves a complete image or none; a rollback
 * leaves the process untouched, fully rolled back, or held half-restored
 * until the next rollback completes it: never running on a mix.
 * Points are random but seeded (KILL_SEED) and spread over the command's
 * whole measured duration, from start-up to exit. Every other rollback
 * uses small staging (ring mode: several copies, decompression inside the
 * pause), where a kill can fall between two copies.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync } from 'node:fs';
import { sameBuffers, type BufferState } from '../controller/app-driver.js';
import { APPS, json, requireBuilt, Sandbox } from './helpers/e2e.js';

const ROUNDS = Number(process.env.KILL_ROUNDS ?? 30);
const SEED = Number(process.env.KILL_SEED ?? 20261122);
/** Bound on the application's wait after its controller died: the lease (30 s) is the worst case. */
const BOUND_MS = 30_000;

const box = new Sandbox();
beforeAll(requireBuilt);
afterAll(() => box.cleanup());

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

/** Runs the CLI and kills it afterMs later (if still running); resolves once it is gone. */
async function killedAfter(args: string[], afterMs: number): Promise<{ killed: boolean; code: number | null }> {
  const child = box.cliAsync(args);
  const done = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((res) => child.on('exit', (code, signal) => res({ code, signal })));
  const timer = setTimeout(() => child.kill('SIGKILL'), afterMs);
  const r = await done;
  clearTimeout(timer);
  return { killed: r.signal === 'SIGKILL', code: r.code };
}

async function timed(args: string[]): Promise<number> {
  const t0 = performance.now();
  const r = await killedAfter(args, 120_000);
  expect(r.code).toBe(0);
  return performance.now() - t0;
}

/** The process as gpuckpt ps sees it, once it has settled after a lost controller. */
async function settled(pid: number): Promise<'running' | 'half-restored'> {
  const t0 = Date.now();
  for (;;) {
    const rows = json<{ pid: number; poolState: string; gate: string }[]>(box.cli(['ps', '--json']).stdout);
    const row = rows.find((r) => r.pid === pid);
    if (row?.poolState === 'half-restored') return 'half-restored';
    if (row?.gate === 'open') return 'running';
    if (Date.now() - t0 > BOUND_MS) throw new Error(`process ${pid} still paused ${BOUND_MS} ms after its controller was killed: ${JSON.stringify(row)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('controller killed at random points', () => {
  it(`${ROUNDS} checkpoints and ${ROUNDS} rollbacks: the application goes on with whole data, images are complete or absent`, async () => {
    const { app, ready } = await box.start(APPS.linked, { env: { FAKE_CUDA_SYNC_DELAY_MS: '20' } });
    const pid = app.pid;
    const base = box.path('base');
    const baseTime = await timed(['checkpoint', String(pid), '--gpu-only', '-o', base]);
    const R = ready.buffers as BufferState[];
    let current = (await app.command('mutate')).buffers as BufferState[];
    // Every other rollback goes through small staging: several copies, decompressed in the pause.
    const rollArgs = (i: number) => ['restore', base, '--into', String(pid), ...(i % 2 ? ['--staging', '8M'] : [])];
    const rollTime = Math.max(await timed(rollArgs(0)), await timed(rollArgs(1)));
    expect(sameBuffers((await app.command('state')).buffers, R)).toBe(true);
    current = (await app.command('mutate')).buffers as BufferState[];

    const random = rng(SEED);
    const seen = { ckpt: { killed: 0, finished: 0, imageLeft: 0 }, roll: { killed: 0, finished: 0, untouched: 0, rolledBack: 0, halfRestored: 0 } };
    // Until each kind was killed ROUNDS times (a command may finish before its kill).
    for (let i = 0; (seen.ckpt.killed < ROUNDS || seen.roll.killed < ROUNDS) && i < 3 * ROUNDS; i++) {
      // A checkpoint: never changes the application; leaves a complete image or none.
      const out = box.path(`k${i}`);
      const ck = await killedAfter(['checkpoint', String(pid), '--gpu-only', '-o', out], random() * baseTime);
      seen.ckpt[ck.killed ? 'killed' : 'finished']++;
      expect(await settled(pid)).toBe('running');
      expect(sameBuffers((await app.command('state')).buffers, current)).toBe(true);
      if (existsSync(out)) {
        seen.ckpt.imageLeft++;
        const inspected = box.cli(['inspect', out, '--json']);
        expect(inspected.code).toBe(0);
        expect(json(inspected.stdout).verified).toBe(true);
      }

      // A rollback to R: untouched, rolled back, or held half-restored.
      const rs = await killedAfter(rollArgs(i), random() * rollTime);
      seen.roll[rs.killed ? 'killed' : 'finished']++;
      if ((await settled(pid)) === 'half-restored') {
        seen.roll.halfRestored++;
        const again = box.cli(['checkpoint', String(pid), '--gpu-only', '-o', box.path(`h${i}`)]);
        expect(again.code).toBe(1); // a mix is never saved as if it were a state
        expect(again.stderr).toMatch(/part of an image/);
        expect(box.cli(['restore', base, '--into', String(pid)]).code).toBe(0);
      }
      const now = (await app.command('state')).buffers as BufferState[];
      if (sameBuffers(now, R)) seen.roll.rolledBack++;
      else {
        expect(sameBuffers(now, current)).toBe(true);
        seen.roll.untouched++;
      }
      current = (await app.command('mutate')).buffers as BufferState[];
    }
    console.log(`kill tests (seed ${SEED}): ${JSON.stringify(seen)}`);
    expect(seen.ckpt.killed).toBeGreaterThanOrEqual(ROUNDS);
    expect(seen.roll.killed).toBeGreaterThanOrEqual(ROUNDS);
    expect(await app.quit()).toBe(0);
  }, 600_000);
});
