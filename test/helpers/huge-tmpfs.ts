/**
 * Why this process cannot mount a tmpfs of huge pages, as gpuckpt's
 * staging and scratch directories do (no right to mount, EPERM; a kernel
 * without huge tmpfs, EINVAL), or undefined where it can: tried once on a
 * directory of its own. Where it cannot, gpuckpt falls back on memfds and
 * plain directories.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { native } from '../../native/index.js';

export function hugeTmpfsRefused(): string | undefined {
  const dir = mkdtempSync(join(tmpdir(), 'gpuckpt-huge-probe-'));
  try {
    native().mountHugeTmpfs(dir, 2 << 20);
    native().unmountLazy(dir);
    return undefined;
  } catch (e) {
    return (e as Error).message;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
