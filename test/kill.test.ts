/**
 * The controller SIGKILLed at random points of checkpoints and rollbacks
 * (restore --into), KILL_ROUNDS times each (default 30 + 30), and of
 * suspends and resumes (KILL_ROUNDS / 2 each): the
 * application must answer again within the bound the lease sets, with its
 * data whole. A checkpoint leaves a complete image or none; a rollback
 * leaves the process untouched, fully rolled back, or held half-restored
 * until the next rollback completes it: never running on a mix. A suspend
 * or resume leaves it running or suspended with its data held, and the
 * next resume brings it back.
 * Points are random but seeded (KILL_SEED) and spread over the command's
 * whole measured duration, from start-up to exit. Every other rollback
 * uses small staging (ring mode: several copies, decompression inside the
 * pause), where a kill can fall between two copies.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { sameBuffers, type BufferState } from '../controller/adapters/app-driver.js';
import { APPS, json, requireBuilt, Sandbox } from './helpers/e2e.js';

const ROUNDS = Number(process.env.KILL_ROUNDS ?? 30);
const SEED = Number(process.env.KILL_SEED ?? 20261122);
/** Bound on the application's wait after its controller died: the lease (30 s) is the worst case. */
const BOUND_MS = 30_000;

const box = new Sandbox();
const ckptDir = box.path('driver-state');
const env = { FAKE_CUDA_CKPT_DIR: ckptDir };
beforeAll(() => {
  requireBuilt();
  mkdirSync(ckptDir, { mode: 0o700 });
});
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
async function killedAfter(args: string[], afterMs: number): Promise<{ killed: boolean; code: number | null; ms: number }> {
  const t0 = performance.now();
  const child = box.cliAsync(args, env);
  const done = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((res) => child.on('exit', (code, signal) => res({ code, signal })));
  const timer = setTimeout(() => child.kill('SIGKILL'), afterMs);
  const r = await done;
  clearTimeout(timer);
  return { killed: r.signal === 'SIGKILL', code: r.code, ms: performance.now() - t0 };
}

/** How long a command of one kind runs: the median of its last complete runs. */
class Durations {
  private runs: number[] = [];
  add(ms: number): void {
    this.runs = [...this.runs.slice(-4), ms];
  }
  get ms(): number {
    return [...this.runs].sort((a, b) => a - b)[Math.floor(this.runs.length / 2)]!;
  }
}

async function timed(args: string[], into?: Durations): Promise<number> {
  const r = await killedAfter(args, 120_000);
  expect(r.code).toBe(0);
  into?.add(r.ms);
  return r.ms;
}

/** The process as gpuckpt ps sees it, once it has settled after a lost controller. */
async function settled(pid: number): Promise<'running' | 'half-restored' | 'suspended'> {
  const t0 = Date.now();
  for (;;) {
    const rows = json<{ pid: number; poolState: string; gate: string }[]>(box.cli(['ps', '--json'], env).stdout);
    const row = rows.find((r) => r.pid === pid);
    if (row?.poolState === 'half-restored' || row?.poolState === 'suspended') return row.poolState;
    if (row?.gate === 'open') return 'running';
    if (Date.now() - t0 > BOUND_MS) throw new Error(`process ${pid} still paused ${BOUND_MS} ms after its controller was killed: ${JSON.stringify(row)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('controller killed at random points', () => {
  it(`${ROUNDS} checkpoints, ${ROUNDS} rollbacks, ${ROUNDS / 2} suspends and resumes: the application goes on with whole data, images are complete or absent`, async () => {
    const { app, ready } = await box.start(APPS.linked, { env: { ...env, FAKE_CUDA_SYNC_DELAY_MS: '20', FAKE_CUDA_CKPT_BLOCK: '1' } });
    const pid = app.pid;
    const base = box.path('base');
    const took = { ckpt: new Durations(), roll: new Durations(), suspend: new Durations(), resume: new Durations() };
    await timed(['checkpoint', String(pid), '--gpu-only', '-o', base], took.ckpt);
    const R = ready.buffers as BufferState[];
    let current = (await app.command('mutate')).buffers as BufferState[];
    // Every other rollback goes through small staging: several copies, decompressed in the pause.
    const rollArgs = (i: number) => ['restore', base, '--into', String(pid), ...(i % 2 ? ['--staging', '8M'] : [])];
    await timed(rollArgs(0), took.roll);
    await timed(rollArgs(1), took.roll);
    expect(sameBuffers((await app.command('state')).buffers, R)).toBe(true);
    current = (await app.command('mutate')).buffers as BufferState[];

    const random = rng(SEED);
    await timed(['suspend', String(pid)], took.suspend);
    await timed(['resume', String(pid)], took.resume);
    const seen = {
      ckpt: { killed: 0, finished: 0, imageLeft: 0 },
      roll: { killed: 0, finished: 0, untouched: 0, rolledBack: 0, halfRestored: 0 },
      suspend: { killed: 0, finished: 0, running: 0, suspended: 0, 'half-restored': 0 },
      resume: { killed: 0, finished: 0, running: 0, suspended: 0, 'half-restored': 0 },
    };
    // Until each kind was killed ROUNDS times (a command may finish before its kill).
    for (let i = 0; (seen.ckpt.killed < ROUNDS || seen.roll.killed < ROUNDS) && i < 3 * ROUNDS; i++) {
      // A checkpoint: never changes the application; leaves a complete image or none.
      const out = box.path(`k${i}`);
      const ck = await killedAfter(['checkpoint', String(pid), '--gpu-only', '-o', out], random() * took.ckpt.ms);
      seen.ckpt[ck.killed ? 'killed' : 'finished']++;
      if (!ck.killed) took.ckpt.add(ck.ms);
      expect(await settled(pid)).toBe('running');
      expect(sameBuffers((await app.command('state')).buffers, current)).toBe(true);
      if (existsSync(out)) {
        seen.ckpt.imageLeft++;
        const inspected = box.cli(['inspect', out, '--json'], env);
        expect(inspected.code).toBe(0);
        expect(json(inspected.stdout).verified).toBe(true);
        rmSync(out, { recursive: true });
      }

      // A rollback to R: untouched, rolled back, or held half-restored.
      const rs = await killedAfter(rollArgs(i), random() * took.roll.ms);
      seen.roll[rs.killed ? 'killed' : 'finished']++;
      if (!rs.killed) took.roll.add(rs.ms);
      if ((await settled(pid)) === 'half-restored') {
        seen.roll.halfRestored++;
        const again = box.cli(['checkpoint', String(pid), '--gpu-only', '-o', box.path(`h${i}`)], env);
        expect(again.code).toBe(3); // a mix is never saved as if it were a state
        expect(again.stderr).toMatch(/part of an image/);
        expect(box.cli(['restore', base, '--into', String(pid)], env).code).toBe(0);
      }
      const now = (await app.command('state')).buffers as BufferState[];
      if (sameBuffers(now, R)) seen.roll.rolledBack++;
      else {
        expect(sameBuffers(now, current)).toBe(true);
        seen.roll.untouched++;
      }
      current = (await app.command('mutate')).buffers as BufferState[];

      // A suspend, then a resume, each killed at a random point of its run.
      if (i < ROUNDS / 2) {
        for (const kind of ['suspend', 'resume'] as const) {
          if (kind === 'resume' && (await settled(pid)) === 'running') await timed(['suspend', String(pid)]);
          const k = await killedAfter([kind, String(pid)], random() * took[kind].ms);
          seen[kind][k.killed ? 'killed' : 'finished']++;
          if (!k.killed) took[kind].add(k.ms);
          const state = await settled(pid);
          seen[kind][state]++;
          if (state === 'suspended') await timed(['resume', String(pid)]);
          expect(sameBuffers((await app.command('state')).buffers, current)).toBe(true);
        }
      }
    }
    console.log(`kill tests (seed ${SEED}): ${JSON.stringify(seen)}`);
    expect(seen.ckpt.killed).toBeGreaterThanOrEqual(ROUNDS);
    expect(seen.roll.killed).toBeGreaterThanOrEqual(ROUNDS);
    expect(seen.suspend['half-restored'] + seen.resume['half-restored']).toBe(0);
    expect(await app.quit()).toBe(0);
  }, 600_000);
});
