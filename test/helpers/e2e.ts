/**
 * End-to-end test helpers: real processes (the CLI, the shim, the CPU test
 * application) against the fake libcuda of test/fake-cuda. Needs `npm run
 * build` (shim, addon, TypeScript) and `make test-build` first.
 */
import { afterAll, beforeAll } from 'vitest';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { AppDriver, type AppEvent } from '../../controller/adapters/app-driver.js';

export const ROOT = resolve(import.meta.dirname, '..', '..');
export const BIN = join(ROOT, 'bin', 'gpuckpt');
export const TEST_BUILD = join(ROOT, 'build', 'test');
export const FAKE_LIB = join(TEST_BUILD, 'fake');
/** The shim with its test-only fault injection (shim/testing): GPUCKPT_SHIM for applications whose driver calls a test fails. */
export const FAULTS_SHIM = { GPUCKPT_SHIM: join(TEST_BUILD, 'shim', 'libgpuckpt.so') };
/** The CLI with its test-only fault injector (GPUCKPT_TEST_FAULT, GPUCKPT_TEST_DRIVER_FAULT); every test's CLI runs with it. */
export const FAULTS_CLI = { NODE_OPTIONS: `--import=${pathToFileURL(join(ROOT, 'test', 'helpers', 'fault-injector.mjs')).href}` };
export const APPS = {
  linked: join(TEST_BUILD, 'pool_app_linked'),
  procAddress: join(TEST_BUILD, 'pool_app_dlopen'),
};

export function requireBuilt(): void {
  for (const p of [join(ROOT, 'build', 'libgpuckpt.so'), join(ROOT, 'dist', 'cli', 'main.js'), APPS.linked, APPS.procAddress])
    if (!existsSync(p)) throw new Error(`${p} is missing: run npm run build && make test-build`);
}

/** kB of lazily freed (MADV_FREE) memory the process holds: /proc/PID/smaps_rollup. */
export function lazyFreeKiB(pid: number): number {
  const m = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8').match(/^LazyFree:\s+(\d+)/m);
  return m ? Number(m[1]) : 0;
}

/** kB present of the process's one private anonymous mapping of sizeKiB (/proc/PID/smaps); throws unless there is one. */
export function mappingRssKiB(pid: number, sizeKiB: number): number {
  const kib = (m: string, field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(m)?.[1]);
  const found = readFileSync(`/proc/${pid}/smaps`, 'utf8')
    .split(/^(?=[0-9a-f]+-[0-9a-f]+ )/m)
    .filter((m) => /^\S+ rw-p 0+ 00:00 0\s*$/.test(m.split('\n')[0]) && kib(m, 'Size') === sizeKiB);
  if (found.length !== 1) throw new Error(`process ${pid} has ${found.length} private anonymous mappings of ${sizeKiB} kB`);
  return kib(found[0], 'Rss');
}

/** Polls until cond() holds or about two seconds have passed; its last value. */
export async function eventually(cond: () => boolean | Promise<boolean>): Promise<boolean> {
  for (let i = 0; i < 100 && !(await cond()); i++) await new Promise((r) => setTimeout(r, 20));
  return cond();
}

/** Whether cond held within ms, asked every 10 ms (a failed read counts as not yet). */
export async function within(ms: number, cond: () => boolean): Promise<boolean> {
  for (const t0 = Date.now(); Date.now() - t0 < ms; await new Promise((r) => setTimeout(r, 10))) {
    try {
      if (cond()) return true;
    } catch {}
  }
  return false;
}

/** A private run directory and environment per test file. */
export class Sandbox {
  readonly dir = mkdtempSync(join(tmpdir(), 'gpuckpt-e2e-'));
  readonly runDir = join(this.dir, 'run');
  readonly apps: AppDriver[] = [];

  /** Staging pieces of 64 KiB, so the small pools of these tests still copy across piece boundaries. */
  env(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
    return { ...process.env, LD_LIBRARY_PATH: FAKE_LIB, GPUCKPT_RUN_DIR: this.runDir, GPUCKPT_LOG: 'error', GPUCKPT_STAGING_PIECE: '64K', GPUCKPT_STAGING_FILE: '1M', ...FAULTS_CLI, ...extra };
  }

  cli(args: string[], extra: Record<string, string> = {}): { code: number | null; stdout: string; stderr: string } {
    const r = spawnSync(BIN, args, { env: this.env(extra), encoding: 'utf8', timeout: 60_000 });
    return { code: r.status, stdout: r.stdout, stderr: r.stderr };
  }

  /** The CLI as a child we can kill (for the controller-killed tests). */
  cliAsync(args: string[], extra: Record<string, string> = {}) {
    return spawn(BIN, args, { env: this.env(extra), stdio: ['ignore', 'pipe', 'pipe'] });
  }

  /** Starts a test application under `gpuckpt run` and waits for ready. */
  async start(app: string, opts: { runArgs?: string[]; env?: Record<string, string> } = {}): Promise<{ app: AppDriver; ready: AppEvent }> {
    const driver = new AppDriver(BIN, ['run', ...(opts.runArgs ?? []), '--', app], this.env(opts.env));
    this.apps.push(driver);
    const ready = await driver.next(20_000);
    if (ready.event !== 'ready') throw new Error(`app did not start: ${JSON.stringify(ready)} ${driver.stderr}`);
    return { app: driver, ready };
  }

  path(name: string): string {
    return join(this.dir, name);
  }

  async cleanup(): Promise<void> {
    await Promise.all(this.apps.map((a) => a.quit().catch(() => undefined)));
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/**
 * A sandbox whose processes share the fake driver's checkpoint-state
 * directory and use the fake CRIU: for tests of suspend, resume and
 * whole-process images. env goes to both the applications and the CLI.
 */
export function checkpointingSandbox(): { box: Sandbox; env: Record<string, string> } {
  const box = new Sandbox();
  const dir = box.path('driver-state');
  beforeAll(() => {
    requireBuilt();
    mkdirSync(dir, { mode: 0o700 });
  });
  afterAll(() => box.cleanup());
  return { box, env: { FAKE_CUDA_CKPT_DIR: dir, GPUCKPT_CRIU: join(ROOT, 'test', 'fake-criu', 'criu') } };
}

export function json<T = any>(text: string): T {
  return JSON.parse(text) as T;
}
