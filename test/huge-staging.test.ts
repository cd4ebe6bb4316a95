/**
 * Staging on huge pages (the default where the mount is allowed;
 * GPUCKPT_HUGE_STAGING=0 turns it off; engine/staging-files.ts
 * hugeStaging): files on a tmpfs of huge pages of their own, unlinked, the
 * mount detached at once; the shim takes them as given staging
 * (GPCK_STAGING_GIVEN: such files cannot be sealed, the shim takes them
 * unlinked on a tmpfs). End to end with the fake driver: a gpu-only image
 * restored bit for bit, each way, and a whole-process checkpoint whose
 * pool image fails, the process resumed from the snapshot holder's copy of
 * those files. Skipped, with the reason, where this machine refuses the
 * mount.
 */
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { existsSync, fstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { sameBuffers } from '../controller/adapters/app-driver.js';
import { closeStaging } from '../controller/adapters/session.js';
import { hugeStaging } from '../controller/engine/staging-files.js';
import { tempDirName } from '../controller/image/temp-dirs.js';
import { native } from '../native/index.js';
import { APPS, checkpointingSandbox, eventually, json } from './helpers/e2e.js';
import { hugeTmpfsRefused } from './helpers/huge-tmpfs.js';

const { box, env } = checkpointingSandbox();
const MiB = 1024 * 1024;

const refused = hugeTmpfsRefused();
if (refused) console.log(`huge staging tests skipped: a tmpfs of huge pages cannot be mounted here (${refused})`);

/** Staging's mounts under a run directory (other runs' are not this test's). */
const hugeMounts = (runDir: string) => readFileSync('/proc/self/mountinfo', 'utf8').split('\n').filter((l) => l.includes(`${runDir}/`) && l.includes('huge-staging'));

describe.skipIf(refused !== undefined)('staging on huge pages', () => {
  it('is files of the staging sizes, unlinked, on a mount already gone', () => {
    const runDir = mkdtempSync(join(tmpdir(), 'gpuckpt-huge-run-'));
    const was = process.env.GPUCKPT_RUN_DIR;
    process.env.GPUCKPT_RUN_DIR = runDir;
    try {
      const staging = hugeStaging(5 * MiB + 100, { GPUCKPT_STAGING_FILE: '2M' })!;
      try {
        expect(staging.size).toBe(5 * MiB + 4096);
        expect(staging.fileBytes).toBe(2 * MiB);
        expect(staging.fds.map((fd) => fstatSync(fd).size)).toEqual([2 * MiB, 2 * MiB, MiB + 4096]);
        for (const fd of staging.fds) {
          expect(fstatSync(fd).nlink).toBe(0);
          // Named from the root of a mount detached already, and unlinked.
          expect(readlinkSync(`/proc/self/fd/${fd}`)).toMatch(/^\/\d \(deleted\)$/);
          expect(writeSync(fd, Buffer.from('data'), 0, 4, 0)).toBe(4);
        }
        expect(hugeMounts(runDir)).toEqual([]);
        expect(readdirSync(runDir)).toEqual([]);
      } finally {
        closeStaging(staging);
      }
    } finally {
      if (was === undefined) delete process.env.GPUCKPT_RUN_DIR;
      else process.env.GPUCKPT_RUN_DIR = was;
      rmSync(runDir, { recursive: true, force: true });
    }
  });

  it("undoes the mount a controller killed between its mount and detaching left, once that controller is gone", async () => {
    const runDir = mkdtempSync(join(tmpdir(), 'gpuckpt-huge-run-'));
    const was = process.env.GPUCKPT_RUN_DIR;
    process.env.GPUCKPT_RUN_DIR = runDir;
    const gone = spawnSync('true').pid!; // exited and reaped: its PID names a dead controller
    const left = join(runDir, tempDirName('huge-staging', gone));
    const live = join(runDir, tempDirName('huge-staging')); // this process's: kept
    try {
      for (const dir of [left, live]) {
        mkdirSync(dir);
        native().mountHugeTmpfs(dir, 4 * MiB);
      }
      closeStaging(hugeStaging(4 * MiB, { GPUCKPT_STAGING_FILE: '2M' })!);
      expect(await eventually(() => !existsSync(left))).toBe(true);
      expect(readdirSync(runDir)).toEqual([basename(live)]);
      expect(hugeMounts(runDir)).toHaveLength(1);
    } finally {
      for (const dir of [left, live])
        try {
          native().unmountLazy(dir);
        } catch {
          // undone already
        }
      if (was === undefined) delete process.env.GPUCKPT_RUN_DIR;
      else process.env.GPUCKPT_RUN_DIR = was;
      rmSync(runDir, { recursive: true, force: true });
    }
  });

  it('carries a gpu-only image, restored bit for bit', async () => {
    const { app, ready } = await box.start(APPS.linked, { env: { ...env, GPUCKPT_LOG: 'debug' } });
    const image = box.path('huge-gpu-only');
    const ck = box.cli(['checkpoint', String(app.pid), '--gpu-only', '-o', image], { ...env, GPUCKPT_LOG: 'debug' });
    expect(ck.code).toBe(0);
    expect(ck.stderr).toMatch(new RegExp(`staging: process ${app.pid}: .* of staging on huge pages, \\d+ files`));
    expect(ck.stderr).not.toMatch(/did not take staging on huge pages|refused the controller's staging/);
    await app.command('mutate'); // its stderr read meanwhile
    // The shim sees the files are on huge pages (fewer threads prepare them).
    expect(app.stderr).toMatch(/staging: preparing \d+ pieces on \d+ threads \(files of huge pages\)/);
    expect(box.cli(['restore', image, '--into', String(app.pid)], env).code).toBe(0);
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
    expect(hugeMounts(box.runDir)).toEqual([]);
    // Loaded through staging on huge pages too, which the shim takes as given.
    await app.command('mutate');
    const rs = box.cli(['restore', image, '--into', String(app.pid)], { ...env, GPUCKPT_LOG: 'debug' });
    expect(rs.code).toBe(0);
    expect(rs.stderr).toMatch(/staging: .* of staging to load on huge pages, \d+ files/);
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
    expect(hugeMounts(box.runDir)).toEqual([]);
  });

  it("is left out with GPUCKPT_HUGE_STAGING=0: the shim's memfds carry the image, and memfds load it", async () => {
    const { app, ready } = await box.start(APPS.linked, { env: { ...env, GPUCKPT_LOG: 'debug' } });
    const image = box.path('memfd-gpu-only');
    const off = { ...env, GPUCKPT_HUGE_STAGING: '0', GPUCKPT_LOG: 'debug' };
    const ck = box.cli(['checkpoint', String(app.pid), '--gpu-only', '-o', image], off);
    expect(ck.code).toBe(0);
    await app.command('mutate');
    const rs = box.cli(['restore', image, '--into', String(app.pid)], off);
    expect(rs.code).toBe(0);
    expect(`${ck.stderr}${rs.stderr}${app.stderr}`).not.toMatch(/huge pages/);
    expect(app.stderr).toMatch(/staging: preparing \d+ pieces on \d+ threads\n/);
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
  });

  it.each([
    ['pinned by the shim (GPUCKPT_SUSPEND_BOUNCE=0)', '0'],
    ["filled through the shim's bounce ring (the default)", '1'],
  ])("is what the snapshot holder keeps while CRIU dumps, %s: a pool image failing then resumes the process from it, with its data", async (_, bounce) => {
    const { app, ready } = await box.start(APPS.linked, { env: { ...env, FAKE_CUDA_CKPT_BLOCK: '1', GPUCKPT_LOG: 'debug' } });
    const out = box.path(`huge-pool-unwritten-${bounce}`);
    const r = box.cli(['checkpoint', String(app.pid), '-o', out], { ...env, GPUCKPT_TEST_FAULT: 'image-write', GPUCKPT_LOG: 'debug', GPUCKPT_SUSPEND_BOUNCE: bounce });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`of staging on huge pages`));
    expect(r.stderr).toMatch(new RegExp(`suspend ${app.pid}: hand-off done`));
    expect(r.stderr.split('\n').filter((l) => l.startsWith('gpuckpt: '))).toEqual([expect.stringMatching(new RegExp(`^gpuckpt: injected fault at image-write .*; process ${app.pid} resumed$`))]);
    const row = json<any[]>(box.cli(['ps', '--json'], env).stdout).find((p) => p.pid === app.pid);
    expect(row.poolState).toBe('active');
    expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
    // Pinned, the shim prepares the files piece by piece; through the ring, none of them.
    const prepared = /staging: preparing \d+ pieces on \d+ threads \(files of huge pages\)/;
    if (bounce === '1') expect(app.stderr).not.toMatch(prepared);
    else expect(app.stderr).toMatch(prepared);
  });
});
