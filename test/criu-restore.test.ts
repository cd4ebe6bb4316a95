/**
 * When `criu restore` counts as done, and what an attached restore waits
 * for. CRIU writes its --pidfile before the tree is released, and an
 * attached CRIU reaps the tree's root and exits 0 whatever its status: an
 * attached restore that took the pidfile for the end removed the images
 * under CRIU and drove a process still being restored (GPU host: one
 * attached restore in two), and always ended 0. CRIU now runs detached,
 * the root coming back as gpuckpt's child (--restore-sibling) for its exit
 * status. The fake CRIU restores for 0.2 s, waits at the post-restore gate
 * (criu-gate.ts) and writes the pidfile, but cannot make the tree our
 * child; sibling_restore does only that.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { restoredJobStatus } from '../cli/output.js';
import { criuRestoreTree, findCriu } from '../controller/adapters/criu.js';
import { GpuckptError } from '../controller/base/errors.js';
import { killProcess } from '../controller/adapters/processes.js';
import type { ProcessRestoreSummary } from '../controller/verbs/process-restore.js';
import { eventually, ROOT, within } from './helpers/e2e.js';

const dir = mkdtempSync(join(tmpdir(), 'gpuckpt-criu-restore-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const stateOf = (pid: number) => readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /, '')[0];
/** Gone, or a zombie that its parent (not this test) has yet to reap. */
const ended = (pid: number) => !existsSync(`/proc/${pid}`) || stateOf(pid) === 'Z';
const options = { shellJob: false, terminal: false, inherit: [], args: [], until: Promise.resolve() };

/** A "dumped" process, stopped as the fake CRIU leaves it, and no child of ours; its image directory. */
function dumped(name: string): { pid: number; images: string } {
  const pid = Number(execFileSync('sh', ['-c', 'sleep 30 >/dev/null 2>&1 & echo $!'], { encoding: 'utf8' }));
  process.kill(pid, 'SIGSTOP');
  const images = join(dir, name);
  mkdirSync(images);
  writeFileSync(join(images, 'fake-criu.json'), JSON.stringify({ pid, tree: [String(pid)] }));
  return { pid, images };
}
const fakeCriu = () => findCriu(join(ROOT, 'test', 'fake-criu', 'criu'));

describe('criu restore', () => {
  it.each([
    ['attached', false],
    ['detached', true],
  ])('%s: returns once CRIU is done and the tree runs, not at the pidfile', async (name, detach) => {
    const { pid, images } = dumped(name);
    try {
      const { done } = await criuRestoreTree(fakeCriu(), images, images, { ...options, detach });
      expect(stateOf(pid)).not.toBe('T');
      expect(JSON.parse(readFileSync(join(images, 'fake-criu-restore.json'), 'utf8')).options).toEqual(detach ? [] : ['--restore-sibling']);
      if (!detach) {
        let finished = false;
        void done.then(() => (finished = true));
        await new Promise((r) => setTimeout(r, 300));
        expect(finished).toBe(false); // attached: until the application ends
        process.kill(pid, 'SIGKILL');
      }
      // Not our child (the fake cannot make it one): attached, its end without a status.
      expect(await done).toEqual(detach ? { code: 0, signal: null, signalNumber: null } : { code: null, signal: null, signalNumber: null });
    } finally {
      killProcess(pid);
    }
  });

  it('holds the processes it brought back at post-restore until `until` resolves', async () => {
    const { pid, images } = dumped('gate-go');
    try {
      let go!: () => void;
      const until = new Promise<void>((r) => (go = r));
      let returned = false;
      const restoring = criuRestoreTree(fakeCriu(), images, images, { ...options, detach: true, until }).then(() => (returned = true));
      await new Promise((r) => setTimeout(r, 600)); // the fake restores for 0.2 s, then waits at the gate
      expect(stateOf(pid)).toBe('T');
      expect(returned).toBe(false);
      go();
      await restoring;
      expect(stateOf(pid)).not.toBe('T');
    } finally {
      killProcess(pid);
    }
  });

  it('a refusal at the gate ends them before they ran, and is the error thrown', async () => {
    const { pid, images } = dumped('gate-no');
    try {
      const until = new Promise<void>((_, rej) => setTimeout(() => rej(new GpuckptError('OTHER_CHIP', 'the image was taken on another chip')), 400));
      await expect(criuRestoreTree(fakeCriu(), images, images, { ...options, detach: true, until })).rejects.toThrow(/^the image was taken on another chip$/);
      expect(await within(10_000, () => ended(pid))).toBe(true);
      expect(readFileSync(join(images, 'restore.log'), 'utf8')).toMatch(/Aborting restore due to post-restore script/);
    } finally {
      killProcess(pid);
    }
  });

  it('the controller gone while CRIU waits at the gate: the script reads an end of file, and CRIU ends the tree', async () => {
    const { pid, images } = dumped('gate-gone');
    // A controller of its own, killed while its CRIU waits: its pipe to the script closes with it.
    const script = `import { criuRestoreTree, findCriu } from ${JSON.stringify(join(ROOT, 'dist', 'controller', 'adapters', 'criu.js'))};
      await criuRestoreTree(findCriu(${JSON.stringify(join(ROOT, 'test', 'fake-criu', 'criu'))}), ${JSON.stringify(images)}, ${JSON.stringify(images)}, { detach: true, shellJob: false, terminal: false, inherit: [], args: [], until: new Promise(() => {}) });`;
    const controller = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: 'ignore' });
    try {
      expect(await within(10_000, () => existsSync(join(images, 'restore.log')) && stateOf(pid) === 'T')).toBe(true);
      await new Promise((r) => setTimeout(r, 400)); // at the gate
      controller.kill('SIGKILL');
      expect(await within(10_000, () => ended(pid))).toBe(true);
      expect(readFileSync(join(images, 'restore.log'), 'utf8')).toMatch(/Aborting restore due to post-restore script/);
    } finally {
      controller.kill('SIGKILL');
      killProcess(pid);
    }
  });

  it.each([
    ['exit 3', { code: 3, signal: null, signalNumber: null }],
    ['signal 15', { code: null, signal: 'SIGTERM', signalNumber: 15 }],
    ['signal 40', { code: null, signal: 'SIG40', signalNumber: 40 }],
  ])('attached, the root a child of ours: its end as it was (%s)', async (end, expected) => {
    const images = join(dir, `sibling-${end.replace(' ', '-')}`);
    mkdirSync(images);
    const criu = findCriu(join(ROOT, 'build', 'test', 'sibling_restore'));
    process.env.SIBLING_END = end;
    try {
      const { done } = await criuRestoreTree(criu, images, images, { ...options, detach: false });
      expect(await done).toEqual(expected);
    } finally {
      delete process.env.SIBLING_END;
    }
  });

  it('attached, failing after the root was made: the root is ended and reaped, its PID free', async () => {
    const images = join(dir, 'sibling-failed');
    mkdirSync(images);
    const criu = findCriu(join(ROOT, 'build', 'test', 'sibling_restore'));
    Object.assign(process.env, { SIBLING_FAIL: '1', SIBLING_AFTER_MS: '30000', SIBLING_PID_COPY: join(images, 'root-seen') });
    try {
      await expect(criuRestoreTree(criu, images, images, { ...options, detach: false })).rejects.toThrow(/^criu restore of .* failed/);
    } finally {
      delete process.env.SIBLING_FAIL;
      delete process.env.SIBLING_AFTER_MS;
      delete process.env.SIBLING_PID_COPY;
    }
    const root = Number(readFileSync(join(images, 'root-seen'), 'utf8'));
    expect(await eventually(() => !existsSync(`/proc/${root}`))).toBe(true); // neither running nor a zombie
  });

  it('an attached restore ends as a shell reports its job: the code, 128 + N for signal N, 1 and why when not known', () => {
    const as = (end: Partial<ProcessRestoreSummary>) => restoredJobStatus({ pid: 42, exitCode: null, signal: null, signalNumber: null, ...end } as ProcessRestoreSummary);
    expect(as({ exitCode: 3 })).toBe(3);
    expect(as({ exitCode: 0 })).toBe(0);
    expect(as({ signal: 'SIG40', signalNumber: 40 })).toBe(168);
    const write = process.stderr.write;
    let said = '';
    process.stderr.write = ((t: string) => ((said += t), true)) as typeof process.stderr.write;
    try {
      expect(as({})).toBe(1);
    } finally {
      process.stderr.write = write;
    }
    expect(said).toBe('gpuckpt: process 42 has ended, its exit status unknown: CRIU did not make it a child of gpuckpt (run through a wrapper?)\n');
  });
});
