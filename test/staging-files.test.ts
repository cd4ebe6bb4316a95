/**
 * Staging the controller makes for a restore (controller/engine/staging-files.ts):
 * files sized as the shim sizes its own, each sealed so it cannot shrink
 * under the application's mapping (the shim refuses any that could; the
 * protocol client test checks that side).
 */
import { fstatSync, ftruncateSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { createStaging, stagingFileBytes } from '../controller/engine/staging-files.js';
import { closeStaging } from '../controller/adapters/session.js';

const MiB = 1024 * 1024;

describe('staging files', () => {
  it('are 32 MiB each by default, GPUCKPT_STAGING_FILE in whole 2 MiB otherwise, and never more than the shim takes', () => {
    expect(stagingFileBytes(1700 * MiB, {})).toBe(32 * MiB);
    // 16 GiB in 250 files at most: 66 MiB each (65.5, in whole 2 MiB).
    expect(stagingFileBytes(16 * 1024 * MiB, {})).toBe(66 * MiB);
    expect(stagingFileBytes(44 * MiB, { GPUCKPT_STAGING_FILE: '1M' })).toBe(2 * MiB);
    expect(stagingFileBytes(44 * MiB, { GPUCKPT_STAGING_FILE: '6M' })).toBe(6 * MiB);
    // 250 files at most: 1 TiB needs files of 4 GiB + alignment.
    const tib = 1024 * 1024 * MiB;
    const per = stagingFileBytes(tib, {});
    expect(per % (2 * MiB)).toBe(0);
    expect(Math.ceil(tib / per)).toBeLessThanOrEqual(250);
    expect(() => stagingFileBytes(MiB, { GPUCKPT_STAGING_FILE: 'lots' })).toThrow(/GPUCKPT_STAGING_FILE "lots" is not a size/);
  });

  it('are laid end to end, the last one shorter, each sealed against shrinking and growing', () => {
    const size = 5 * MiB + 4096;
    const staging = createStaging(size, { GPUCKPT_STAGING_FILE: '1M' });
    try {
      expect(staging.size).toBe(size);
      const fileBytes = staging.fileBytes;
      expect(fileBytes).toBe(2 * MiB);
      expect(staging.fds).toHaveLength(Math.ceil(size / fileBytes));
      const sizes = staging.fds.map((fd) => fstatSync(fd).size);
      expect(sizes.reduce((a, b) => a + b, 0)).toBe(size);
      expect(sizes.slice(0, -1).every((s) => s === fileBytes)).toBe(true);
      for (const fd of staging.fds) {
        expect(() => ftruncateSync(fd, 0)).toThrow(/EPERM/);
        expect(() => ftruncateSync(fd, 1 << 30)).toThrow(/EPERM/);
      }
    } finally {
      closeStaging(staging);
    }
    expect(staging.fds).toEqual([]);
  });
});
