/**
 * Making files durable before an image is published under its name: a
 * rename is atomic, but only what was fsynced before it survives a crash.
 * And what may stand where an image is about to be published.
 */
import { existsSync, linkSync, mkdirSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { open, readdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { GpuckptError } from '../base/errors.js';

/** fsync of a directory: its entries (files created, renamed) survive a crash. */
export async function fsyncDir(dir: string): Promise<void> {
  const fh = await open(dir, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/**
 * fsync of every file under dir, several at once (CRIU writes its pages in
 * one large file and its other state in many small ones: the large one's
 * writeback then overlaps the small ones' metadata syncs), then of each
 * directory once the files in it are.
 */
export async function syncTree(dir: string): Promise<void> {
  const entries = await readdir(dir, { withFileTypes: true });
  await Promise.all(
    entries.map(async (e) => {
      const path = join(dir, e.name);
      if (e.isDirectory()) return syncTree(path);
      if (!e.isFile()) return; // a symlink's or socket's entry is synced with the directory
      const fh = await open(path, 'r');
      try {
        await fh.sync();
      } finally {
        await fh.close();
      }
    }),
  );
  await fsyncDir(dir);
}

/**
 * Refuses an output path that is taken, unless force; even then only a
 * gpuckpt image is replaced, never other data at a mistyped path.
 */
export function refuseTakenTarget(target: string, force: boolean): void {
  if (!existsSync(target)) return;
  if (!force) throw new GpuckptError('IMAGE_EXISTS', `${target} already exists (use --force to replace it)`);
  if (!existsSync(join(target, 'manifest'))) throw new GpuckptError('IMAGE_EXISTS', `${target} exists and is not a gpuckpt image: not replacing it`);
}

/** The complete image at work becomes target (replacing an image there with force). */
export async function publishImage(work: string, target: string, force: boolean): Promise<void> {
  if (force && existsSync(target)) rmSync(target, { recursive: true, force: true });
  renameSync(work, target);
  await fsyncDir(dirname(target));
}

/**
 * The tree at src again at dst, of hard links (one filesystem): both names
 * hold it until one is removed, and the directories made are durable.
 */
export async function linkTree(src: string, dst: string): Promise<void> {
  mkdirSync(dst, { mode: 0o700 });
  for (const e of readdirSync(src, { withFileTypes: true })) {
    if (e.isDirectory()) await linkTree(join(src, e.name), join(dst, e.name));
    else linkSync(join(src, e.name), join(dst, e.name));
  }
  await fsyncDir(dst);
}
