/**
 * When `criu restore` counts as done, and what an attached restore waits
 * for. CRIU writes its --pidfile before the tree is released, and an
 * attached CRIU reaps the tree's root and exits 0 whatever its status: an
 * attached restore that took the pidfile for the end removed the images
 * under CRIU and drove a process still being restored (GPU host: one
 * attached restore in two). CRIU now runs detached, the root coming back
 * as gpuckpt's child (--restore-sibling) for its exit status; the fake CRIU
 * writes the pidfile first and restores for 0.2 s, but cannot make the
 * tree a child of ours: its end is then waited for without a status (the
 * status itself is tested on the GPU host with CRIU).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
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
  ])('%s: returns once CRIU is done and the tree runs, not at the pidfile', async (name, detach) => {
    // A "dumped" process, stopped as the fake CRIU leaves it, and no child of ours.
    const pid = Number(execFileSync('sh', ['-c', 'sleep 30 >/dev/null 2>&1 & echo $!'], { encoding: 'utf8' }));
    try {
      process.kill(pid, 'SIGSTOP');
      const images = join(dir, name);
      mkdirSync(images);
      writeFileSync(join(images, 'fake-criu.json'), JSON.stringify({ pid, tree: [String(pid)] }));
      const criu = findCriu(join(ROOT, 'test', 'fake-criu', 'criu'));
      const { done } = await criuRestoreTree(criu, images, images, { detach, shellJob: false, terminal: false, inherit: [], args: [] });
      expect(stateOf(pid)).not.toBe('T');
      if (!detach) {
        let ended = false;
        void done.then(() => (ended = true));
        await new Promise((r) => setTimeout(r, 300));
        expect(ended).toBe(false); // attached: until the application ends
        process.kill(pid, 'SIGKILL');
      }
      expect(await done).toEqual(detach ? { code: 0, signal: null } : { code: null, signal: null });
    } finally {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {}
    }
  });
});
