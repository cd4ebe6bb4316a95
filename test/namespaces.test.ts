/**
 * A process in its own PID and mount namespaces, as in a container: its
 * shim names its socket by the PID it sees (1) in a run directory only it
 * sees (a tmpfs of its mount namespace). Controlled from outside by the
 * PID the host gives it, through /proc/PID/status (NSpid) and
 * /proc/PID/root: listed by ps, checkpoint, suspend and resume, restore --into, and
 * plain CRIU with the plugin (skipped where namespaces cannot be made).
 * And a socket that names one process but is another's (a run directory
 * shared with a container) is refused, never acted on: the kernel says
 * who listens on it (SO_PEERCRED).
 */
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { AppDriver, sameBuffers, type BufferState } from '../controller/adapters/app-driver.js';
import { APPS, BIN, checkpointingSandbox, json, ROOT } from './helpers/e2e.js';

const { box, env } = checkpointingSandbox();
const canUnshare = spawnSync('unshare', ['--pid', '--fork', '--mount', 'true']).status === 0;
const ok = (args: string[]) => {
  const r = box.cli(args, env);
  if (r.code !== 0) throw new Error(`gpuckpt ${args.join(' ')}: ${r.stderr.trim()}`);
  return r;
};

/** The pool app under gpuckpt run in new PID and mount namespaces, its run directory a tmpfs there; its PID here. */
async function startContained(): Promise<{ app: AppDriver; pid: number; R: BufferState[] }> {
  const script = 'mkdir -p -m 700 "$GPUCKPT_RUN_DIR" && mount -t tmpfs -o mode=700 tmpfs "$GPUCKPT_RUN_DIR" && exec "$0" run -- "$1"';
  const app = new AppDriver('unshare', ['--pid', '--fork', '--mount', '--propagation', 'private', 'sh', '-c', script, BIN, APPS.linked], box.env(env));
  box.apps.push(app);
  const ready = await app.next(20_000);
  if (ready.event !== 'ready') throw new Error(`app did not start: ${JSON.stringify(ready)}`);
  expect(ready.pid).toBe(1); // as it sees itself
  const children = readdirSync(`/proc/${app.pid}/task`).flatMap((t) => readFileSync(`/proc/${app.pid}/task/${t}/children`, 'utf8').trim().split(/\s+/).filter(Boolean));
  return { app, pid: Number(children[0]), R: ready.buffers as BufferState[] };
}

describe('a socket named by another process', () => {
  it('is refused in one line, not acted on', async () => {
    const { app } = await box.start(APPS.linked, { env });
    const { app: other } = await box.start(APPS.linked, { env });
    // As a run directory shared with a container could show it: the other's name on the first one's socket.
    const name = join(box.runDir, `${other.pid}.sock`);
    unlinkSync(name);
    symlinkSync(join(box.runDir, `${app.pid}.sock`), name);
    const r = box.cli(['checkpoint', String(other.pid), '--gpu-only', '-o', box.path('wrong')], env);
    expect(r.code).not.toBe(0);
    expect(r.stderr.trim()).toMatch(new RegExp(`^gpuckpt: process ${other.pid} is not running under gpuckpt \\(.*belongs to another process, process ${app.pid}\\)$`));
    expect(existsSync(box.path('wrong'))).toBe(false);
  });
});

describe.skipIf(!canUnshare)('a process in its own PID and mount namespaces', () => {
  it('is checkpointed, suspended and resumed, and restored into, by the PID it has here', async () => {
    const { app, pid, R } = await startContained();
    // Its socket is not where ours would be: only through /proc/PID/root.
    expect(existsSync(join(box.runDir, '1.sock'))).toBe(false);
    const row = (json(ok(['ps', '--json']).stdout) as { pid: number; poolState: string }[]).find((r) => r.pid === pid);
    expect(row?.poolState).toBe('active');
    const A = box.path('ns-A');
    ok(['checkpoint', String(pid), '--gpu-only', '-o', A]);
    expect(json(ok(['suspend', String(pid), '--json']).stdout).pid).toBe(pid);
    ok(['resume', String(pid)]);
    expect(sameBuffers((await app.command('state')).buffers as BufferState[], R)).toBe(true);
    await app.command('mutate');
    ok(['restore', A, '--into', String(pid)]);
    expect(sameBuffers((await app.command('state')).buffers as BufferState[], R)).toBe(true);
  });

  it('goes through plain CRIU with the plugin, by that PID', async () => {
    const { app, pid, R } = await startContained();
    const dir = box.path('ns-criu');
    mkdirSync(dir);
    const criu = (args: string[]) => spawnSync(join(ROOT, 'test', 'fake-criu', 'criu'), args, { env: box.env(env), encoding: 'utf8' });
    expect(criu(['dump', '-t', String(pid), '-D', dir, '-L', join(ROOT, 'build', 'criu'), '--shell-job']).status).toBe(0);
    // Named by the PID it has in its namespace, which CRIU's restore keeps (its PID here does not).
    expect(existsSync(join(dir, 'gpuckpt-pool-1', 'manifest'))).toBe(true);
    expect(criu(['restore', '-D', dir, '-L', join(ROOT, 'build', 'criu'), '--shell-job']).status).toBe(0);
    let back: BufferState[] | undefined;
    for (let i = 0; i < 100 && !sameBuffers(back, R); i++) {
      back = (await app.command('state')).buffers as BufferState[];
      if (!sameBuffers(back, R)) await new Promise((r) => setTimeout(r, 50));
    }
    expect(sameBuffers(back, R)).toBe(true);
  });
});

describe.skipIf(!canUnshare)('a process in its own PID namespace sharing our run directory', () => {
  it('is listed by its PID here, and its socket (named 1) never taken for our process 1', async () => {
    // As a container with the host's /tmp bind-mounted: its first process names its socket 1.sock beside ours.
    const script = 'exec "$0" run -- "$1"';
    const app = new AppDriver('unshare', ['--pid', '--fork', 'sh', '-c', script, BIN, APPS.linked], box.env(env));
    box.apps.push(app);
    const ready = await app.next(20_000);
    expect(ready.pid).toBe(1);
    expect(existsSync(join(box.runDir, '1.sock'))).toBe(true);
    const children = readFileSync(`/proc/${app.pid}/task/${app.pid}/children`, 'utf8').trim().split(/\s+/).map(Number);
    const pid = children[0]!;
    const rows = json(ok(['ps', '--json']).stdout) as { pid: number }[];
    expect(rows.map((r) => r.pid)).toContain(pid);
    expect(rows.map((r) => r.pid)).not.toContain(1);
    const r = box.cli(['checkpoint', '1', '--gpu-only', '-o', box.path('init')], env);
    expect(r.code).not.toBe(0);
    expect(r.stderr.trim()).toMatch(/^gpuckpt: process 1 is not running under gpuckpt \(/);
    expect(existsSync(box.path('init'))).toBe(false);
    await app.quit();
  });
});
