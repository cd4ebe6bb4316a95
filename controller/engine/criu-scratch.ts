/**
 * Scratch directories for CRIU's files. A restore unpacks CRIU's pages
 * into /dev/shm when it has room (CRIU reads them at memory speed and
 * nothing reaches a disk), on a tmpfs of the restore's own with huge pages
 * where this process may mount one, else the run directory, else beside
 * the image. A checkpoint has CRIU write into such a tmpfs where it may
 * (makeDumpScratch), its pages packed from there and its other files
 * moved beside them. GPUCKPT_HUGE_SCRATCH=0: no tmpfs of their own.
 *
 * Huge pages because both are bound by the kernel's page insertion: the
 * 2-rank DDP job's 2.6 GB unpacked in 0.25-0.30 s against 0.52-0.54 s on
 * /dev/shm, and its restore took 2.73 s against 3.25 s (2x H200,
 * docs/ARCHITECTURE.md, "A scratch of huge pages").
 */
import { copyFileSync, mkdirSync, readdirSync, statfsSync, unlinkSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { freemem } from 'node:os';
import { join } from 'node:path';
import { GpuckptError } from '../base/errors.js';
import { log } from '../base/log.js';
import { ownRunDir } from '../adapters/run-dir.js';
import { removeStaleTempDirs, tempDirName } from '../image/temp-dirs.js';
import { osErrorText } from '../image/os-error.js';
import { native } from '../../native/index.js';

export interface Scratch {
  dir: string;
  /** On a tmpfs of its own with huge pages. */
  huge: boolean;
  /** Removes it, its pages freed (unmounted, or on libuv's threads). */
  remove(): Promise<void>;
}

const MEMORY_DIR = '/dev/shm';
/** Room kept free beside the pages. */
const MARGIN = 256 << 20;

/** Each file's last huge page is whole in a tmpfs of huge pages. */
const HUGE_PAGE = 2 << 20;

/** A fresh scratch directory where files (bytes in all) fit, stale ones of dead restores removed first. */
export async function makeScratch(bytes: number, files: number, beside: string): Promise<Scratch> {
  const tried: string[] = [];
  for (const parent of [MEMORY_DIR, ownRunDir(), beside]) {
    try {
      mkdirSync(parent, { recursive: true, mode: 0o700 });
      await removeStaleTempDirs(parent, unmountQuietly);
      const fs = statfsSync(parent);
      if (fs.bavail * fs.bsize < bytes + MARGIN) {
        tried.push(`${parent}: ${fs.bavail * fs.bsize} bytes free`);
        continue;
      }
      const dir = join(parent, tempDirName('criu-restore'));
      mkdirSync(dir, { mode: 0o700 });
      const huge = parent === MEMORY_DIR && mountHuge(dir, bytes + files * HUGE_PAGE + MARGIN);
      return { dir, huge, remove: () => removeScratch(dir, huge) };
    } catch (e) {
      tried.push(`${parent}: ${osErrorText(e)}`);
    }
  }
  throw new GpuckptError('HOST_MEMORY', `no room to unpack CRIU's ${bytes} bytes of pages for the restore (${tried.join('; ')}); nothing was restored`);
}

/**
 * Where CRIU writes a checkpoint's files, the packer reading its pages
 * there (criu-pages-pack.ts): a tmpfs of the checkpoint's own with huge
 * pages, where the mount is allowed and the memory available holds twice
 * what the tree has resident (treeBytes); else undefined, and CRIU writes
 * beside the image. The 2-rank DDP job's tree, 6 GB, dumped in 1.88 s
 * there against 2.81 s into ext4's page cache and 3.31 s into /dev/shm
 * (2x H200, test/gpu/probes/criu_rank_dumps.sh).
 */
export async function makeDumpScratch(treeBytes: number): Promise<Scratch | undefined> {
  // A cgroup's limit counts: tmpfs pages are not reclaimed as a disk's
  // page cache is (node before 20.13 knows the host's memory only).
  const available = typeof process.availableMemory === 'function' ? process.availableMemory() : freemem();
  if (available < 2 * treeBytes + MARGIN) return undefined;
  const dir = join(MEMORY_DIR, tempDirName('criu-dump'));
  try {
    await removeStaleTempDirs(MEMORY_DIR, unmountQuietly);
    mkdirSync(dir, { mode: 0o700 });
    // A cap, not a reservation: CRIU writes no more than the tree holds.
    if (mountHuge(dir, Math.floor((available * 3) / 4), 'criu dump')) return { dir, huge: true, remove: () => removeScratch(dir, true) };
  } catch (e) {
    log('debug', 'criu dump', `no scratch for CRIU (${osErrorText(e)}): it writes beside the image`);
  }
  await rm(dir, { recursive: true, force: true });
  return undefined;
}

/** Every file of from moved into to (copied: another file system), but those named as leave says. */
export function moveFiles(from: string, to: string, leave?: RegExp): void {
  for (const e of readdirSync(from, { withFileTypes: true })) {
    if (!e.isFile() || leave?.test(e.name)) continue;
    copyFileSync(join(from, e.name), join(to, e.name));
    unlinkSync(join(from, e.name));
  }
}

/** Whether a huge-page tmpfs of bytes now lies on dir: where the mount is allowed, unless GPUCKPT_HUGE_SCRATCH=0. */
function mountHuge(dir: string, bytes: number, what = 'criu pages unpack'): boolean {
  if (process.env.GPUCKPT_HUGE_SCRATCH === '0') return false;
  try {
    native().mountHugeTmpfs(dir, bytes);
    log('debug', what, `scratch ${dir} on a tmpfs of its own with huge pages`);
    return true;
  } catch (e) {
    log('debug', what, `no tmpfs of its own for the scratch (${(e as Error).message})`);
    return false;
  }
}

async function removeScratch(dir: string, huge: boolean): Promise<void> {
  if (huge) unmountQuietly(dir);
  await rm(dir, { recursive: true, force: true });
}

/** A scratch (or staging's tmpfs) of a controller that died, or this one's, unmounted if it is a mount point (no error if not). */
export function unmountQuietly(dir: string): void {
  try {
    native().unmountLazy(dir);
  } catch {
    // No mount there: a plain directory.
  }
}
