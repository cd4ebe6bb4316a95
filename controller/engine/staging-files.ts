/**
 * Staging memory this process makes: memfds laid end to end, sealed so they
 * cannot shrink, that the codec workers fill and the shim maps once given
 * them (gpuckpt_protocol.h, GPCK_STAGING_GIVEN). Made here, a restore can
 * decompress an image before the process it goes to exists: while CRIU
 * brings it back. Staging is files on a tmpfs of huge pages (hugeStaging)
 * where the mount is allowed, unless GPUCKPT_HUGE_STAGING=0: for a restore's
 * loading (newStaging) and for a pool image, whose staging is then made
 * here too (stagingForShim).
 *
 * Files are as the shim makes its own: GPUCKPT_STAGING_FILE (32 MiB) each,
 * more when that would take more than MAX_STAGING_FILES, whole 2 MiB; the
 * kernel faults in one memfd's pages one thread at a time, so many files
 * let the workers fill staging in parallel.
 */
import { ftruncateSync, mkdirSync, openSync, rmSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { GpuckptError } from '../base/errors.js';
import { log } from '../base/log.js';
import { closeStaging, type ShimSession, type StagingMemory } from '../adapters/session.js';
import { ownRunDir } from '../adapters/run-dir.js';
import { removeStaleTempDirs, tempDirName } from '../image/temp-dirs.js';
import { unmountQuietly } from './criu-scratch.js';
import { formatBytes, parseSize } from '../base/units.js';
import { MAX_STAGING_FILES, native } from '../../native/index.js';

/** GP_DEFAULT_STAGING_FILE of shim/interpose/config.h (which says why). */
const DEFAULT_FILE_BYTES = 32 * 1024 * 1024;
const FILE_ALIGN = 2 * 1024 * 1024;
const PAGE = 4096;

/** Bytes per memfd for size bytes of staging. */
export function stagingFileBytes(size: number, env: NodeJS.ProcessEnv = process.env): number {
  const set = env.GPUCKPT_STAGING_FILE;
  const least = set ? Number(parseSize(set, 'GPUCKPT_STAGING_FILE')) : DEFAULT_FILE_BYTES;
  const per = Math.max(least, Math.ceil(size / MAX_STAGING_FILES));
  return Math.ceil(per / FILE_ALIGN) * FILE_ALIGN;
}

/** The length of each file of size bytes of staging in files of fileBytes: all of them but the last, which takes what is left. */
export function stagingParts(size: number, fileBytes: number): number[] {
  const parts: number[] = [];
  for (let off = 0; off < size; off += fileBytes) parts.push(Math.min(fileBytes, size - off));
  return parts;
}

/** size bytes (whole pages) of new staging, as sealed memfds of stagingFileBytes(size). */
export function createStaging(size: number, env: NodeJS.ProcessEnv = process.env): StagingMemory {
  const fileBytes = stagingFileBytes(size, env);
  const staging: StagingMemory = { fds: [], fileBytes, size, registerNs: 0 };
  try {
    for (const n of stagingParts(size, fileBytes)) staging.fds.push(native().createMemfd(n));
  } catch (e) {
    closeStaging(staging);
    throw new GpuckptError('HOST_MEMORY', `cannot make ${formatBytes(size)} of staging memory: ${(e as Error).message}`);
  }
  return staging;
}

/** size bytes of staging this process fills: on huge pages where wanted and the mount is allowed, else memfds. */
export function newStaging(size: number, env: NodeJS.ProcessEnv = process.env): StagingMemory {
  const huge = hugeStaging(size, env);
  if (huge) log('debug', 'staging', `${formatBytes(huge.size)} of staging to load on huge pages, ${huge.fds.length} files`);
  return huge ?? createStaging(size, env);
}

/**
 * Whether a suspend's copy (prepareDuringCopy) goes through the shim's
 * bounce ring into staging that is never pinned (unless
 * GPUCKPT_SUSPEND_BOUNCE=0): pinned staging must be unpinned before the
 * driver's checkpoint, 0.11-0.29 s for a DDP rank's 153 registrations.
 */
export function suspendThroughBounce(env: NodeJS.ProcessEnv = process.env): boolean {
  return env.GPUCKPT_SUSPEND_BOUNCE !== '0';
}

/**
 * A pool image's staging for the shim: on huge pages where wanted and the
 * mount is allowed, else the shim's own memfds. ready: prepared (faulted
 * in, pinned) before this returns. unpinned: the shim copies through its
 * bounce ring instead of pinning the files (huge pages only).
 */
export async function stagingForShim(session: ShimSession, bytes: number, ready: boolean, unpinned = false): Promise<StagingMemory> {
  const huge = hugeStaging(bytes);
  if (huge) {
    try {
      await session.giveStaging(huge, unpinned, ready);
      log('debug', 'staging', `process ${session.pid}: ${formatBytes(huge.size)} of staging on huge pages, ${huge.fds.length} files`);
      return huge;
    } catch (e) {
      closeStaging(huge);
      log('warn', 'staging', `process ${session.pid} did not take staging on huge pages (${(e as Error).message}): its own memfds instead`);
    }
  }
  return session.mapStaging(bytes, 'shared', ready);
}

/**
 * size bytes (whole pages) of staging as files of stagingFileBytes(size) on
 * a tmpfs of huge pages: 2 MiB pages fault in, pin and unmap several times
 * faster than a memfd's 4 KiB (test/gpu/probes/staging_pages.c), which
 * memfds cannot have where the kernel's shmem_enabled is never. The tmpfs
 * is mounted in a directory of its own, sized to every huge page the files
 * can take (a fault past it would be a SIGBUS in the application), the
 * files made and unlinked, and the mount detached at once: they live as
 * long as their fds and mappings, reached by no path. Undefined with
 * GPUCKPT_HUGE_STAGING=0, and where the mount is refused (not root, a
 * container without CAP_SYS_ADMIN). A controller killed between the mount
 * and its detaching leaves the mount: the next one undoes it.
 */
export function hugeStaging(size: number, env: NodeJS.ProcessEnv = process.env): StagingMemory | undefined {
  if (env.GPUCKPT_HUGE_STAGING === '0') return undefined;
  size = Math.ceil(size / PAGE) * PAGE;
  const fileBytes = stagingFileBytes(size, env);
  const parts = stagingParts(size, fileBytes);
  const room = parts.reduce((s, n) => s + Math.ceil(n / FILE_ALIGN) * FILE_ALIGN, FILE_ALIGN);
  const staging: StagingMemory = { fds: [], fileBytes, size, registerNs: 0 };
  let dir: string | undefined;
  let mounted = false;
  try {
    mkdirSync(ownRunDir(), { recursive: true, mode: 0o700 });
    void removeStaleTempDirs(ownRunDir(), unmountQuietly);
    dir = join(ownRunDir(), tempDirName('huge-staging'));
    mkdirSync(dir, { mode: 0o700 });
    native().mountHugeTmpfs(dir, room);
    mounted = true;
    parts.forEach((n, i) => {
      const path = join(dir!, String(i));
      staging.fds.push(openSync(path, 'wx+', 0o600));
      ftruncateSync(staging.fds[i]!, n);
      unlinkSync(path);
    });
    return staging;
  } catch (e) {
    closeStaging(staging);
    log('debug', 'staging', `no tmpfs of huge pages for staging (${(e as Error).message}): the shim's memfds`);
    return undefined;
  } finally {
    // The directory goes once the tmpfs is off it (the files live on).
    if (dir && (!mounted || detached(dir))) rmSync(dir, { recursive: true, force: true });
  }
}

/** Whether the staging's tmpfs came off dir; said, not thrown, if the kernel would not. */
function detached(dir: string): boolean {
  try {
    native().unmountLazy(dir);
    return true;
  } catch (e) {
    log('warn', 'staging', `the tmpfs of huge pages for staging stays mounted on ${dir}: ${(e as Error).message}`);
    return false;
  }
}
