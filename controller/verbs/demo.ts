/**
 * `gpuckpt demo`: builds the bundled sample CUDA program with nvcc, runs it
 * under the shim, takes a live checkpoint, lets the program change its data,
 * rolls it back, and shows that contents and addresses are as they were.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AppDriver, sameBuffers, type BufferState } from '../adapters/app-driver.js';
import { checkpointGpuOnly } from './checkpoint.js';
import { GpuckptError } from '../base/errors.js';
import { restoreInto } from './rollback.js';
import { makeRunPlan } from './run-plan.js';
import { formatBytes } from '../base/units.js';
import { native, packageRoot } from '../../native/index.js';

export function findNvcc(): string {
  const candidates = [process.env.CUDA_HOME && join(process.env.CUDA_HOME, 'bin', 'nvcc'), '/usr/local/cuda/bin/nvcc'];
  for (const c of candidates) if (c && existsSync(c)) return c;
  for (const dir of (process.env.PATH ?? '').split(':')) if (dir && existsSync(join(dir, 'nvcc'))) return join(dir, 'nvcc');
  throw new GpuckptError('NO_NVCC', 'nvcc not found: install the CUDA toolkit or set CUDA_HOME');
}

function requireGpu(): void {
  const probe = native().probeDriver();
  if (!probe.driver || probe.devices < 1)
    throw new GpuckptError('NO_GPU', `no NVIDIA GPU on this machine (${probe.error ?? 'no devices'}): the demo needs one; npm test runs without`);
}

function buildSample(nvcc: string): string {
  const root = packageRoot();
  const outDir = join(root, 'build', 'demo');
  mkdirSync(outDir, { recursive: true });
  const exe = join(outDir, 'demo_app');
  try {
    execFileSync(nvcc, ['-O2', '-arch=native', '-o', exe, join(root, 'cli', 'demo', 'demo_app.cu')], { stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (e) {
    const msg = ((e as { stderr?: Buffer }).stderr?.toString() ?? '').trim().split('\n')[0];
    throw new GpuckptError('NO_NVCC', `nvcc could not build the sample: ${msg || (e as Error).message}`);
  }
  return exe;
}

function describe(buffers: BufferState[]): string {
  return buffers.map((b) => `    ${b.addr}  ${formatBytes(b.size).padStart(10)}  checksum ${b.checksum}`).join('\n');
}

export async function runDemo(log: (line: string) => void): Promise<void> {
  requireGpu();
  const exe = buildSample(findNvcc());
  log('built the sample program cli/demo/demo_app.cu with nvcc');
  const plan = makeRunPlan([exe], {});
  const app = new AppDriver(plan.program, plan.args, { ...process.env, ...plan.env });
  const work = mkdtempSync(join(tmpdir(), 'gpuckpt-demo-'));
  try {
    const ready = await app.next();
    if (ready.event !== 'ready') throw new GpuckptError('INTERNAL', `the sample program did not start: ${JSON.stringify(ready)}`);
    log(`started it under the shim (pid ${app.pid}); its device buffers live in the pool:\n${describe(ready.buffers!)}`);

    const image = join(work, 'snap');
    const ck = await checkpointGpuOnly(app.pid, image, { progress: false });
    log(`live checkpoint: ${ck.allocations} allocations, ${formatBytes(ck.rawBytes)} -> ${formatBytes(ck.storedBytes)} on disk in ${ck.seconds.toFixed(2)} s; the program was paused ${(ck.pauseSeconds * 1000).toFixed(1)} ms`);

    const mutated = await app.command('mutate');
    if (sameBuffers(mutated.buffers, ready.buffers)) throw new GpuckptError('INTERNAL', 'the sample program did not change its data');
    log(`the program overwrote its buffers:\n${describe(mutated.buffers!)}`);

    const rb = await restoreInto(image, app.pid, { progress: false });
    log(`rolled back from the image: ${formatBytes(rb.rawBytes)} in ${rb.seconds.toFixed(2)} s; paused ${(rb.pauseSeconds * 1000).toFixed(1)} ms`);

    const after = await app.command('state');
    if (!sameBuffers(after.buffers, ready.buffers))
      throw new GpuckptError('INTERNAL', `after rollback the data differs from the checkpoint:\n${describe(after.buffers ?? [])}`);
    log(`after rollback, contents and addresses are exactly as at the checkpoint:\n${describe(after.buffers!)}`);
  } finally {
    await app.quit();
    rmSync(work, { recursive: true, force: true });
  }
}
