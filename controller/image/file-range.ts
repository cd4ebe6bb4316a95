/** Reading a range of a file whole, where read(2) may return less than asked. */
import { closeSync, openSync, readSync } from 'node:fs';
import { GpuckptError } from '../base/errors.js';

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
