/**
 * End to end on the CPU: the real shim in real processes, driven by the real
 * CLI, against the fake libcuda. run, ps, checkpoint --gpu-only, change the
 * data, restore --into, data back bit for bit, inspect.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync } from 'node:fs';
import { sameBuffers } from '../controller/adapters/app-driver.js';
import { FORMAT_VERSION } from '../controller/image/index.js';
import { APPS, json, requireBuilt, Sandbox } from './helpers/e2e.js';

const box = new Sandbox();
beforeAll(requireBuilt);
afterAll(() => box.cleanup());

for (const [variant, app] of Object.entries(APPS)) {
  describe(`round trip (${variant})`, () => {
    it('checkpoints live, rolls back bit for bit, and inspects', async () => {
      const { app: a, ready } = await box.start(app);
      expect(ready.pid).toBe(a.pid); // gpuckpt run execs: the PID is the application's
      for (const b of ready.buffers!) expect(BigInt(b.addr) >= 0x600000000000n).toBe(true);

      const ps = json<any[]>(box.cli(['ps', '--json']).stdout);
      const row = ps.find((r) => r.pid === a.pid);
      expect(row).toBeDefined();
      expect(row.poolBase).toBe('0x600000000000');
      expect(row.poolState).toBe('active');
      expect(row.devices[0].allocations).toBe(4);
      expect(row.devices[0].bytesInUse).toBe(ready.buffers!.reduce((s, b) => s + Math.ceil(b.size / 512) * 512, 0));

      const image = box.path(`img-${variant}`);
      const ck = box.cli(['checkpoint', String(a.pid), '--gpu-only', '-o', image, '--json']);
      expect(ck.stderr).toBe('');
      expect(ck.code).toBe(0);
      const summary = json(ck.stdout);
      expect(summary).toMatchObject({ pid: a.pid, allocations: 4, image });
      expect(summary.rawBytes).toBe(row.devices[0].bytesInUse);
      for (const k of ['seconds', 'pauseSeconds', 'copyGBps', 'ratio', 'storedBytes']) expect(typeof summary[k]).toBe('number');

      // A live checkpoint leaves the application's data alone.
      expect(sameBuffers((await a.command('state')).buffers, ready.buffers)).toBe(true);

      const mutated = await a.command('mutate');
      for (let i = 0; i < ready.buffers!.length; i++) expect(mutated.buffers![i]!.checksum).not.toBe(ready.buffers![i]!.checksum);

      const rb = box.cli(['restore', image, '--into', String(a.pid), '--json']);
      expect(rb.stderr).toBe('');
      expect(rb.code).toBe(0);
      expect(json(rb.stdout)).toMatchObject({ pid: a.pid, rawBytes: summary.rawBytes });
      expect(sameBuffers((await a.command('state')).buffers, ready.buffers)).toBe(true);

      const ins = box.cli(['inspect', image, '--json']);
      expect(ins.code).toBe(0);
      const report = json(ins.stdout);
      expect(report.verified).toBe(true);
      expect(report.version).toBe(FORMAT_VERSION);
      expect(report.source.pid).toBe(a.pid);
      expect(report.pool.base).toBe('0x600000000000');
      expect(report.devices[0].name).toBe('Fake CUDA Device 0');
      expect(report.allocations.map((x: any) => x.addr).sort()).toEqual(ready.buffers!.map((b) => b.addr).sort());

      const human = box.cli(['inspect', image]);
      expect(human.stdout).toMatch(/checksums\s+all verified/);

      expect(await a.quit()).toBe(0);
    });
  });
}

describe('the shim', () => {
  it('stages through one memfd when the application is short of fds, checkpoint and restore alike, and says so', async () => {
    const { app: a, ready } = await box.start(APPS.linked, { env: { GPUCKPT_LOG: 'warn' } });
    // 44 MiB of pool data in 2 MiB memfds wants 22 fds; 8 are left.
    expect((await a.command('fds-left 8')).opened).toBeGreaterThan(8);
    const image = box.path('img-few-fds');
    const ck = box.cli(['checkpoint', String(a.pid), '--gpu-only', '-o', image, '--json']);
    expect(ck.stderr).toBe('');
    expect(ck.code).toBe(0);
    await a.command('mutate');
    expect(box.cli(['restore', image, '--into', String(a.pid), '--json']).code).toBe(0);
    expect(sameBuffers((await a.command('state')).buffers, ready.buffers)).toBe(true);
    expect(await a.quit()).toBe(0);
    expect(a.stderr).toMatch(/staging: no fds for \d+ memfds: staging as one/);
    // The restore's own staging did not fit either: it fell back to the shim's.
    expect(a.stderr).toMatch(/control: a request's fds did not fit \(\d+ arrived\): refused it; the controller falls back/);
  });

  it('gives the same addresses run after run', async () => {
    const first = await box.start(APPS.linked);
    const second = await box.start(APPS.procAddress);
    expect(second.ready.buffers!.map((b) => b.addr)).toEqual(first.ready.buffers!.map((b) => b.addr));
    expect(sameBuffers(second.ready.buffers, first.ready.buffers)).toBe(true);
  });

  it('keeps range queries truthful for interior pool pointers and pitches rows', async () => {
    const { app } = await box.start(APPS.procAddress);
    const info = await app.command('info');
    for (const r of info.ranges as any[]) {
      expect(r.r).toEqual([0, 0]);
      expect(r.base).toBe(r.addr);
      expect(r.start).toBe(r.addr);
    }
    expect((info.ranges as any[]).map((r) => r.size)).toEqual([1 << 20, (3 << 20) + 512, 40 << 20, 4096]);
    expect(info.pitch).toBe(1024);
    expect(BigInt(info.pitched as string) >= 0x600000000000n).toBe(true);
    expect(info.free).toBeLessThanOrEqual(info.total as number);
  });

  it('counts memory outside the pool', async () => {
    const { app } = await box.start(APPS.linked);
    await app.command('managed');
    const row = json<any[]>(box.cli(['ps', '--json']).stdout).find((r) => r.pid === app.pid);
    expect(row.outsidePool.managed).toBe(1 << 20);
  });

  it('counts the driver calls that pass the gate', async () => {
    const { app } = await box.start(APPS.linked);
    const calls = () => json<any[]>(box.cli(['ps', '--json']).stdout).find((r) => r.pid === app.pid).driverCalls as number;
    const before = calls();
    expect(before).toBeGreaterThan(0); // cuInit and the allocations of the start
    await app.command('state');
    expect(calls()).toBeGreaterThan(before);
  });

  it('serves many threads allocating, launching and freeing while checkpoints run', async () => {
    const { app, ready } = await box.start(APPS.linked);
    await app.command('threads 8');
    for (let i = 0; i < 3; i++) {
      const r = box.cli(['checkpoint', String(app.pid), '--gpu-only', '-o', box.path(`load-${i}`), '--json']);
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
    }
    const stopped = await app.command('stop');
    expect(stopped.errors).toBe(0);
    expect(stopped.iterations as number).toBeGreaterThan(0);
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
  });

  it('honours --pool-base and --pool-size', async () => {
    const { app, ready } = await box.start(APPS.linked, { runArgs: ['--pool-base', '0x500000000000', '--pool-size', '1G'] });
    expect(ready.buffers![0]!.addr).toBe('0x500000000000');
    const row = json<any[]>(box.cli(['ps', '--json']).stdout).find((r) => r.pid === app.pid);
    expect(row.sliceSize).toBe(1 << 30);
    // 1 GiB more does not fit in a 1 GiB slice: the application sees
    // CUDA_ERROR_OUT_OF_MEMORY (2), exactly as from the driver.
    const exited = new Promise<number | null>((r) => app.child.once('exit', r));
    app.child.stdin!.write(`alloc ${1 << 30}\n`);
    expect(await exited).toBe(2);
    expect(app.stderr).toMatch(/cuMemAlloc \(extra\) failed: CUresult 2/);
  });
});
