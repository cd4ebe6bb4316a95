/**
 * Whole-process checkpoints of jobs as users start them, on the CPU with
 * the fake driver and the fake CRIU (test/fake-criu, which dumps nothing
 * but refuses what CRIU refuses first, and records the options it got):
 * a process tree with children that use CUDA and children that do not,
 * what is refused before the job is touched (sockets CRIU cannot carry, a
 * GPU used outside gpuckpt), and a failing dump's message and log.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { release, tmpdir } from 'node:os';
import { join } from 'node:path';
import { sameBuffers } from '../controller/adapters/app-driver.js';
import { APPS, checkpointingSandbox, eventually, json } from './helpers/e2e.js';

const { box, env } = checkpointingSandbox();

const start = () => box.start(APPS.linked, { env: { ...env, FAKE_CUDA_CKPT_BLOCK: '1' } });
const cli = (args: string[], extra: Record<string, string> = {}) => box.cli(args, { ...env, ...extra });
const psRow = (pid: number) => json<any[]>(cli(['ps', '--json']).stdout).find((r) => r.pid === pid);
const oneLine = (stderr: string) => expect(stderr.trimEnd().split('\n')).toHaveLength(1);
const stateOf = (pid: number) => readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /, '')[0];

/** Refused before anything moved: one line, no image, the job running with its data. */
async function refusedUntouched(r: { code: number | null; stderr: string }, pattern: RegExp, app: Awaited<ReturnType<typeof start>>['app'], ready: Awaited<ReturnType<typeof start>>['ready'], out: string, status = 3) {
  expect(r.code).toBe(status);
  expect(r.stderr).toMatch(pattern);
  oneLine(r.stderr);
  expect(existsSync(out)).toBe(false);
  expect(psRow(app.pid)).toMatchObject({ poolState: 'active', gate: 'open' });
  expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
}

const kernelRefusesInetOpts = (() => {
  const [maj = 0, min = 0] = release().split('.').map(Number);
  return maj > 6 || (maj === 6 && min >= 16);
})();

describe('a job of several processes', () => {
  it('a forked child that never uses CUDA and a spawned child that does: both pools saved, the whole tree dumped, all running on', async () => {
    const { app, ready } = await start();
    const forked = (await app.command('fork')).child as number;
    const spawned = (await app.command('spawn')).child as number;
    expect(await eventually(() => psRow(spawned)?.poolState === 'active')).toBe(true);
    const out = box.path('tree');
    const r = cli(['checkpoint', String(app.pid), '-o', out, '--leave-running', '--json']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const s = json<any>(r.stdout);
    expect(s).toMatchObject({ pid: app.pid, members: [app.pid, spawned], route: 'host', whyThroughHost: 'the job has 2 CUDA processes; a copy on the GPU serves a job of one' });
    expect(readdirSync(out).sort()).toEqual(['criu', 'gpu-needs.json', 'manifest', 'members', 'pool.zst']);
    expect(readdirSync(join(out, 'members'))).toEqual([String(spawned)]);
    expect(json(readFileSync(join(out, 'criu', 'fake-criu.json'), 'utf8')).tree.map(Number).sort()).toEqual([app.pid, forked, spawned].sort());
    expect(JSON.parse(readFileSync(join(out, 'criu', 'gpuckpt-process.json'), 'utf8'))).toMatchObject({ members: [app.pid, spawned], tree: expect.arrayContaining([app.pid, forked, spawned]) });
    expect(json(cli(['inspect', join(out, 'members', String(spawned)), '--json']).stdout)).toMatchObject({ kind: 'process', verified: true });
    expect(readdirSync(box.dir).filter((n) => n.includes('gpuckpt-tmp'))).toEqual([]);
    for (const pid of [app.pid, spawned]) expect(psRow(pid)).toMatchObject({ poolState: 'active', gate: 'open' });
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);

    // Without --leave-running the tree stops, every GPU free.
    const stopped = box.path('tree-stopped');
    const r2 = cli(['checkpoint', String(app.pid), '-o', stopped, '--json']);
    expect(r2.stderr).toBe('');
    expect(json<any>(r2.stdout)).toMatchObject({ members: [app.pid, spawned], leftRunning: false });
    expect([app.pid, forked, spawned].map(stateOf)).toEqual(['T', 'T', 'T']);
    for (const pid of [app.pid, forked, spawned]) process.kill(pid, 'SIGKILL');
    await app.quit();
  });

  it('a dump failing midway resumes every CUDA process of the job', async () => {
    const { app, ready } = await start();
    const spawned = (await app.command('spawn')).child as number;
    expect(await eventually(() => psRow(spawned)?.poolState === 'active')).toBe(true);
    const out = box.path('tree-failed');
    const r = cli(['checkpoint', String(app.pid), '-o', out], { FAKE_CRIU_FAIL: 'dump' });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`^gpuckpt: criu dump of process ${app.pid} failed: Error \\(criu/cr-dump.c:1234\\): fake-criu: injected dump failure \\(log: (.*)\\); processes ${app.pid}, ${spawned} resumed$`, 'm'));
    oneLine(r.stderr);
    expect(existsSync(out)).toBe(false);
    expect(readdirSync(box.dir).filter((n) => n.includes('gpuckpt-tmp'))).toEqual([]);
    for (const pid of [app.pid, spawned]) expect(psRow(pid)).toMatchObject({ poolState: 'active', gate: 'open' });
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
    process.kill(spawned, 'SIGKILL');
  });

  it('--parent with several CUDA processes is refused before anything moves', async () => {
    const { app, ready } = await start();
    const spawned = (await app.command('spawn')).child as number;
    expect(await eventually(() => psRow(spawned)?.poolState === 'active')).toBe(true);
    const out = box.path('tree-parent');
    const r = cli(['checkpoint', String(app.pid), '-o', out, '--parent', box.path('nothing')]);
    await refusedUntouched(r, new RegExp(`^gpuckpt: the job of process ${app.pid} has 2 CUDA processes \\(${app.pid}, ${spawned}\\): --parent is for a job with one$`, 'm'), app, ready, out, 2);
    process.kill(spawned, 'SIGKILL');
  });
});

describe("what CRIU cannot carry is refused before the job is touched", () => {
  const servers: Server[] = [];
  const dirs: string[] = [];
  afterAll(() => {
    servers.forEach((s) => s.close());
    dirs.forEach((d) => rmSync(d, { recursive: true, force: true }));
  });

  it('a failing dump names CRIU\'s first error and a log that still exists', async () => {
    const { app, ready } = await start();
    const out = box.path('first-error');
    const r = cli(['checkpoint', String(app.pid), '-o', out], { FAKE_CRIU_FAIL: 'dump' });
    const m = /failed: (Error \(criu\/cr-dump\.c:1234\): fake-criu: injected dump failure) \(log: ([^)]+)\)/.exec(r.stderr);
    expect(m).not.toBeNull();
    expect(readFileSync(m![2]!, 'utf8')).toMatch(/Dumping FAILED/);
    await refusedUntouched({ ...r, stderr: r.stderr }, /resumed$/m, app, ready, out, 1);
  });

  it.each([
    ['CRIU 4.1.1', '4.1.1'],
    ['CRIU 4.2', '4.2'],
  ])('a listening TCP socket with %s: carried, with CRIU 4.1 given the answer the kernel refuses it', async (_, version) => {
    const { app, ready } = await start();
    const port = (await app.command('tcp-listen')).port as number;
    const out = box.path(`tcp-listen-${version}`);
    const r = cli(['checkpoint', String(app.pid), '-o', out, '--leave-running'], { FAKE_CRIU_VERSION: version });
    // CRIU before 4.2 on Linux 6.16+ asks for SO_PASSCRED, which the kernel
    // refuses on TCP sockets: gpuckpt preloads the answer CRIU 4.2 gives.
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const preload = json(readFileSync(join(out, 'criu', 'fake-criu-env.json'), 'utf8')).preload;
    if (kernelRefusesInetOpts && version === '4.1.1') expect(preload).toMatch(/build\/gpuckpt-criu-compat\.so/);
    else expect(preload).not.toMatch(/gpuckpt-criu-compat/);
  });

  it('an established TCP connection needs --tcp-established or --tcp-close, passed with --criu-opt', async () => {
    const { app, ready } = await start();
    const server = createServer(() => undefined);
    servers.push(server);
    await new Promise<void>((res) => server.listen(0, '127.0.0.1', res));
    const port = (server.address() as { port: number }).port;
    expect((await app.command(`tcp-connect ${port}`)).ok).toBe(true);
    const out = box.path('tcp-established');
    const refused = cli(['checkpoint', String(app.pid), '-o', out, '--leave-running'], { FAKE_CRIU_VERSION: '4.2' });
    await refusedUntouched(refused, new RegExp(`^gpuckpt: process ${app.pid} \\(pool_app_linked\\) holds a TCP connection from port \\d+ to port ${port} to a process outside the job: pass --criu-opt=--tcp-established .* or --criu-opt=--tcp-close to drop it$`, 'm'), app, ready, out);
    const r = cli(['checkpoint', String(app.pid), '-o', out, '--leave-running', '--criu-opt=--tcp-established'], { FAKE_CRIU_VERSION: '4.2' });
    expect(r.stderr).toBe('');
    expect(json(readFileSync(join(out, 'criu', 'fake-criu.json'), 'utf8')).options).toContain('--tcp-established');
  });

  it('a Unix socket connected to a process outside the job is refused, naming that process', async () => {
    const { app, ready } = await start();
    const dir = mkdtempSync(join(tmpdir(), 'gpuckpt-unix-'));
    dirs.push(dir);
    let accepted!: () => void;
    const connection = new Promise<void>((res) => (accepted = res));
    const server = createServer(() => accepted());
    servers.push(server);
    await new Promise<void>((res) => server.listen(join(dir, 'sock'), res));
    expect((await app.command(`unix-connect ${join(dir, 'sock')}`)).ok).toBe(true);
    await connection;
    const out = box.path('unix-outside');
    const r = cli(['checkpoint', String(app.pid), '-o', out]);
    await refusedUntouched(
      r,
      new RegExp(`^gpuckpt: process ${app.pid} \\(pool_app_linked\\) fd \\d+ is a Unix socket connected to process ${process.pid} \\(.*\\), outside the job: CRIU cannot restore that connection; close it before the checkpoint`),
      app,
      ready,
      out,
    );
  });

  it('a job whose CUDA has not started yet has nothing on a GPU to save', () => {
    const r = cli(['checkpoint', String(process.pid), '-o', box.path('not-under')]);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(`gpuckpt: process ${process.pid} is not running under gpuckpt (start it with gpuckpt run -- PROGRAM)\n`);
  });
});
