/**
 * Hidden working directories of image writers.
 *
 * A writer builds its image in `.<name>.gpuckpt-tmp-<pid>-<random>` next to the
 * target, so that the final rename stays on one filesystem (atomic) and an
 * interrupted write never shows up under the image's name. The same pattern
 * names an old image being swapped out by a forced replace. A writer that is
 * killed leaves its directory behind; the pid in the name lets a later writer
 * tell abandoned directories (pid gone) from ones still being written.
 *
 * Limitation: pids are only meaningful within one pid namespace and host. Two
 * containers with different pid namespaces writing images into one shared
 * directory could mistake each other's live directory for a stale one.
 */
import { randomBytes } from 'node:crypto';
import { lstat, readdir, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { isAlive } from '../base/pid-alive.js';

const TEMP_MARK = '.gpuckpt-tmp-';
const TEMP_NAME = /^\..+\.gpuckpt-tmp-(\d+)-[0-9a-f]+$/;

/**
 * A fresh hidden name for a working directory of `name`, owned by this
 * process or by owner: the directory is stale only once its owner is gone.
 */
export function tempDirName(name: string, owner = process.pid): string {
  return `.${name}${TEMP_MARK}${owner}-${randomBytes(8).toString('hex')}`;
}

/** The pid that owns a working directory named `entry`, or undefined if it is not one. */
export function tempDirOwner(entry: string): number | undefined {
  const m = TEMP_NAME.exec(entry);
  return m ? Number(m[1]) : undefined;
}

/** The image a working directory at path becomes when it is published: its name without the marks, beside it. */
export function publishedPath(path: string): string | undefined {
  const entry = basename(path);
  return TEMP_NAME.test(entry) ? join(dirname(path), entry.slice(1, entry.lastIndexOf(TEMP_MARK))) : undefined;
}

/**
 * Delete the working directories in `parentDir` left by writers that are no
 * longer running. Best effort: an unreadable parent or an entry that cannot
 * be removed is skipped, since failing here would only block a new image for
 * the sake of old garbage. beforeRemoval(path), if given, runs first on
 * each (a mount on it undone). Returns the paths removed.
 */
export async function removeStaleTempDirs(parentDir: string, beforeRemoval?: (path: string) => void): Promise<string[]> {
  let entries: string[];
  try {
    entries = await readdir(parentDir);
  } catch {
    return [];
  }
  const removed: string[] = [];
  for (const entry of entries) {
    const pid = tempDirOwner(entry);
    if (pid === undefined || isAlive(pid)) continue;
    const full = join(parentDir, entry);
    try {
      // lstat: never follow a symlink that merely has a matching name.
      if (!(await lstat(full)).isDirectory()) continue;
      beforeRemoval?.(full);
      await rm(full, { recursive: true, force: true });
      removed.push(full);
    } catch {
      // Skipped; see above.
    }
  }
  return removed;
}
