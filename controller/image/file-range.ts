/**
 * Reading a range of a file whole, where read(2) may return less than
 * asked. Light on imports: every codec worker loads it at its start.
 */
import { closeSync, openSync, readSync } from 'node:fs';
import { GpuckptError, isGpuckptError } from '../base/errors.js';
import { osErrorText } from './os-error.js';

/** A compressed frame's place in its image's data file. */
export interface FrameSource {
  path: string;
  offset: number;
  length: number;
}

/** length bytes of path from offset, into into (IMAGE_TRUNCATED if the file ends first). */
export function readRange(path: string, offset: number, length: number, into: Uint8Array): Uint8Array {
  const fd = openSync(path, 'r');
  try {
    for (let got = 0; got < length; ) {
      const n = readSync(fd, into, got, length - got, offset + got);
      if (n === 0) throw new GpuckptError('IMAGE_TRUNCATED', `image is truncated: ${path} ends at ${offset + got}, before ${offset + length}`);
      got += n;
    }
    return into;
  } finally {
    closeSync(fd);
  }
}

/**
 * src's compressed bytes, read whole into `into` (a codec worker's own
 * buffer): IMAGE_READ_FAILED naming the file, or IMAGE_TRUNCATED.
 */
export function readFrameSource(src: FrameSource, into: Uint8Array): Uint8Array {
  try {
    return readRange(src.path, src.offset, src.length, into);
  } catch (e) {
    throw readFailed(src.path, e);
  }
}

export function readFailed(path: string, e: unknown): GpuckptError {
  if (isGpuckptError(e)) return e;
  return new GpuckptError('IMAGE_READ_FAILED', `cannot read image ${path}: ${osErrorText(e)}`, { cause: e });
}
