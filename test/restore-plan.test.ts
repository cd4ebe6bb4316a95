/**
 * What a whole-process restore checks and hands CRIU before anything runs
 * (controller/engine/restore-plan.ts), and the reading of CRIU's files.img it
 * rests on (controller/adapters/criu-files.ts): against an image real CRIU 4.1.1
 * wrote (test/fixtures/criu-4.1.1: a process with a log opened with `>`,
 * one with `>>`, a file read, one read-write, and a deleted one), and
 * against the fake CRIU's, written for files changed in every way.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { appendFileSync, mkdtempSync, readlinkSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { isatty } from 'node:tty';
import { spawn, spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { criuRegularFiles } from '../controller/adapters/criu-files.js';
import { restoreFds, type ProcessInfo } from '../controller/engine/restore-plan.js';
import { ROOT } from './helpers/e2e.js';

const FIXTURE = join(ROOT, 'test', 'fixtures', 'criu-4.1.1');
const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

describe("CRIU's files.img", () => {
  it('lists the files CRIU reopens, with flags and the size it checks (none for a file appended to), and leaves out deleted ones', () => {
    const files = criuRegularFiles(FIXTURE).filter((f) => f.path.startsWith('/tmp/fx'));
    expect(files.map((f) => ({ ...f, flags: f.flags.toString(8) }))).toEqual([
      { path: '/tmp/fx/log-trunc', flags: '100001', size: 4n },
      { path: '/tmp/fx/log-append', flags: '102001', size: undefined },
      { path: '/tmp/fx/data', flags: '100000', size: 6n },
      { path: '/tmp/fx/rw', flags: '100002', size: 0n },
      { path: '/tmp/fx', flags: '0', size: undefined },
    ]);
    expect(criuRegularFiles(FIXTURE).some((f) => f.path.includes('gone'))).toBe(false);
  });

  it('a damaged one is refused as a corrupt image', () => {
    const dir = mkdtempSync(join(tmpdir(), 'gpuckpt-files-img-'));
    dirs.push(dir);
    writeFileSync(join(dir, 'files.img'), Buffer.from([0x19, 0x43, 0x56, 0x54, 0x38, 0x31, 0x30, 0x56, 0xff, 0, 0, 0, 8]));
    expect(() => criuRegularFiles(dir)).toThrow(/files\.img: truncated entry at byte 8/);
    writeFileSync(join(dir, 'files.img'), 'not an image');
    expect(() => criuRegularFiles(dir)).toThrow(/files\.img: not the CRIU image it should be/);
  });
});

describe('restore: the files CRIU will reopen', () => {
  /** A files.img, as the fake CRIU writes it, of a process holding the files open as given. */
  function imageOf(files: { name: string; mode: 'trunc' | 'append' | 'read' | 'rw' }[]) {
    const dir = mkdtempSync(join(tmpdir(), 'gpuckpt-restore-plan-'));
    dirs.push(dir);
    const redirect = { trunc: '>', append: '>>', read: '<', rw: '<>' };
    const script = files.map((f, i) => `exec ${i + 3}${redirect[f.mode]}${join(dir, f.name)}; `).join('');
    for (const f of files) writeFileSync(join(dir, f.name), 'first\n');
    const holder = spawn('bash', ['-c', `${script}echo ready; exec sleep 60`], { stdio: ['ignore', 'pipe', 'ignore'] });
    return new Promise<{ dir: string; path: (n: string) => string }>((res) =>
      holder.stdout.once('data', () => {
        const r = spawnSync('node', [join(ROOT, 'test', 'fake-criu', 'files-img.mjs'), dir, String(holder.pid)]);
        holder.kill('SIGKILL');
        expect(r.status).toBe(0);
        res({ dir, path: (n) => join(dir, n) });
      }),
    );
  }
  const info = (extra: Partial<ProcessInfo> = {}): ProcessInfo => ({ pid: 1, shellJob: false, criuVersion: '4.1.1', ...extra });

  it('unchanged files: nothing to hand over', async () => {
    const { dir } = await imageOf([
      { name: 'log', mode: 'trunc' },
      { name: 'data', mode: 'read' },
    ]);
    const fds = restoreFds(dir, info());
    expect(fds.inherit).toEqual([]);
    fds.close();
  });

  it('a log opened write-only that grew, or went away: opened here for appending (created again), and CRIU takes that fd', async () => {
    const { dir, path } = await imageOf([
      { name: 'grew', mode: 'trunc' },
      { name: 'gone', mode: 'trunc' },
      { name: 'appended', mode: 'append' },
    ]);
    appendFileSync(path('grew'), 'written after the checkpoint\n');
    unlinkSync(path('gone'));
    appendFileSync(path('appended'), 'more\n'); // CRIU checks no size of a file opened to append
    const fds = restoreFds(dir, info());
    expect(fds.appended).toEqual([path('grew'), path('gone')]);
    expect(fds.inherit.map((h) => h.resource)).toEqual([path('grew').slice(1), path('gone').slice(1)]);
    expect(fds.inherit.map((h) => readlinkSync(`/proc/self/fd/${h.fd}`))).toEqual([path('grew'), path('gone')]);
    fds.close();
  });

  it.each([
    ['read', 'changed size', (p: string) => appendFileSync(p, 'x'), /^the job's file .*\/f is 7 B now, 6 B when the image was made: CRIU reopens only an unchanged file; put back the file as it was to restore$/],
    ['rw', 'changed size', (p: string) => writeFileSync(p, ''), /^the job's file .*\/f is 0 B now, 6 B when the image was made/],
    ['read', 'went away', (p: string) => unlinkSync(p), /^the job's file .*\/f is gone since the image was made: put it back to restore$/],
  ] as const)('a file open for %s that %s: refused, naming it', async (mode, _, change, message) => {
    const { dir, path } = await imageOf([{ name: 'f', mode }]);
    change(path('f'));
    expect(() => restoreFds(dir, info())).toThrow(message);
  });

  it('standard streams that led outside the job are this command\'s own; a terminal job needs a terminal', async () => {
    const { dir } = await imageOf([]);
    const fds = restoreFds(dir, info({ externalStdio: [{ fd: 1, resource: 'pipe:[42]' }] }));
    expect(fds.inherit).toEqual([{ fd: 1, resource: 'pipe:[42]' }]);
    fds.close();
    if (!isatty(0)) // a vitest worker's stdin is no terminal
      expect(() => restoreFds(dir, info({ terminal: '/dev/pts/7' }))).toThrow(/^process 1 was attached to a terminal \(\/dev\/pts\/7\): restore it from a terminal, which it then uses$/);
  });
});
