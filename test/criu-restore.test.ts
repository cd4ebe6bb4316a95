/**
 * When `criu restore` counts as done. CRIU writes its --pidfile as it forks
 * the root, before anything is restored; an attached restore that took
 * the pidfile for the end removed the images under CRIU and drove a
 * process still being restored (GPU host: one attached restore in two).
 * The fake CRIU writes the pidfile first too, then restores for 0.2 s.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { criuRestoreTree, findCriu } from '../controller/adapters/criu.js';
import { ROOT } from './helpers/e2e.js';

const dir = mkdtempSync(join(tmpdir(), 'gpuckpt-criu-restore-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const stateOf = (pid: number) => readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /, '')[0];

describe('criu restore', () => {
  it.each([
    ['attached', false],
    ['detached', true],
  ])('%s: returns once the tree runs and CRIU is done with its images, not at the pidfile', async (_, detach) => {
    // A "dumped" process: stopped, as the fake CRIU leaves it.
    const sleeper = spawn('sleep', ['30'], { stdio: 'ignore' });
    try {
      process.kill(sleeper.pid!, 'SIGSTOP');
      const images = join(dir, detach ? 'detached' : 'attached');
      mkdirSync(images);
      writeFileSync(join(images, 'fake-criu.json'), JSON.stringify({ pid: sleeper.pid, tree: [String(sleeper.pid)] }));
      const criu = findCriu(join(ROOT, 'test', 'fake-criu', 'criu'));
      const { done } = await criuRestoreTree(criu, images, images, { detach, shellJob: false, terminal: false, inherit: [], args: [] });
      expect(stateOf(sleeper.pid!)).not.toBe('T');
      expect((await done).code).toBe(0);
    } finally {
      sleeper.kill('SIGKILL');
    }
  });
});
