/**
 * Staging memory this process makes: memfds laid end to end, sealed so they
 * cannot shrink, that the codec workers fill and the shim maps once given
 * them (gpuckpt_protocol.h, GPCK_STAGING_GIVEN). Made here, a restore can
 * decompress an image before the process it goes to exists: while CRIU
 * brings it back.
 *
 * Files are as the shim makes its own: GPUCKPT_STAGING_FILE (32 MiB) each,
 * more when that would take more than MAX_STAGING_FILES, whole 2 MiB; the
 * kernel faults in one memfd's pages one thread at a time, so many files
 * let the workers fill staging in parallel.
 */
import { GpuckptError } from '../base/errors.js';
import { closeStaging, type StagingMemory } from '../adapters/session.js';
import { formatBytes, parseSize } from '../base/units.js';
import { MAX_STAGING_FILES, native } from '../../native/index.js';

/** GP_DEFAULT_STAGING_FILE of shim/interpose/config.h (which says why). */
const DEFAULT_FILE_BYTES = 32 * 1024 * 1024;
const FILE_ALIGN = 2 * 1024 * 1024;

/** Bytes per memfd for size bytes of staging. */
export function stagingFileBytes(size: number, env: NodeJS.ProcessEnv = process.env): number {
  const set = env.GPUCKPT_STAGING_FILE;
  const least = set ? Number(parseSize(set, 'GPUCKPT_STAGING_FILE')) : DEFAULT_FILE_BYTES;
  const per = Math.max(least, Math.ceil(size / MAX_STAGING_FILES));
  return Math.ceil(per / FILE_ALIGN) * FILE_ALIGN;
}

/** size bytes (whole pages) of new staging, as sealed memfds of stagingFileBytes(size). */
export function createStaging(size: number, env: NodeJS.ProcessEnv = process.env): StagingMemory {
  const fileBytes = stagingFileBytes(size, env);
  const staging: StagingMemory = { fds: [], fileBytes, size, registerNs: 0 };
  try {
    for (let off = 0; off < size; off += fileBytes) staging.fds.push(native().createMemfd(Math.min(fileBytes, size - off)));
  } catch (e) {
    closeStaging(staging);
    throw new GpuckptError('HOST_MEMORY', `cannot make ${formatBytes(size)} of staging memory: ${(e as Error).message}`);
  }
  return staging;
}
