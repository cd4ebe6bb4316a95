/**
 * Opening an image and reading its frames, with every failure named.
 *
 * How `ImageReader.open(path)` classifies what it finds (first match wins):
 *
 *   path does not exist (or a component is not a directory) .... IMAGE_MISSING
 *   path is not a directory ..................................... IMAGE_NOT_AN_IMAGE
 *   directory is empty (e.g. a pre-created output dir) .......... IMAGE_MISSING
 *   directory has entries but no `manifest` ..................... IMAGE_NOT_AN_IMAGE
 *   `manifest` is not a regular file ............................ IMAGE_NOT_AN_IMAGE
 *   manifest header problems, hash, payload ..................... see decodeManifest
 *     (bad magic: IMAGE_NOT_AN_IMAGE, version: IMAGE_VERSION,
 *      short/empty: IMAGE_TRUNCATED, hash/payload/validation: IMAGE_CORRUPT)
 *   `pool.zst` missing, or shorter than the frames need ......... IMAGE_TRUNCATED
 *   `pool.zst` not a regular file, or longer than the frames .... IMAGE_CORRUPT
 *   the OS refuses a read (EACCES, EIO, ...) .................... IMAGE_READ_FAILED
 *
 * Opening checks structure only; the data itself is proven by decompressing
 * (zstd checksums): `verify()` does that for every frame, restore for each
 * frame it loads. Both report IMAGE_DATA_CORRUPT naming the frame.
 */
import { open, readdir, stat } from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { GpuckptError, isGpuckptError } from '../base/errors.js';
import { hex } from './manifest-check.js';
import { decompressFrame } from './frame-codec.js';
import { fromPlanes } from './byte-planes.js';
import { DATA_FILE, MANIFEST_FILE, MANIFEST_HEADER_LENGTH, MAX_MANIFEST_PAYLOAD } from './format.js';
import { decodeManifest } from './manifest.js';
import { readFailed, type FrameSource } from './file-range.js';
import type { FrameRecord, Manifest } from './manifest-types.js';
import { faultPoint } from '../base/faults.js';

export type { FrameSource } from './file-range.js';

export interface VerifyProgress {
  framesDone: number;
  frames: number;
  rawBytesDone: bigint;
  rawBytes: bigint;
}

export interface VerifyResult {
  frames: number;
  rawBytes: bigint;
  ok: true;
}

/** How messages name a frame: index, device and device address, so a user can tell what was damaged. */
export function frameLabel(frame: FrameRecord, index: number): string {
  return `frame ${index} (device ${frame.device}, address ${hex(frame.addr)}, ${frame.length} bytes)`;
}

export class ImageReader {
  private data: FileHandle | undefined;

  private constructor(
    /** Absolute path of the image directory. */
    readonly path: string,
    readonly manifest: Manifest,
    /** The SHA-256 of the manifest payload just read (and checked against it). */
    readonly manifestSha256: Buffer,
    data: FileHandle,
  ) {
    this.data = data;
  }

  static async open(imagePath: string): Promise<ImageReader> {
    const path = resolve(imagePath);
    const { manifest, sha256 } = await readManifest(path);
    const data = await openData(path, manifest);
    return new ImageReader(path, manifest, sha256, data);
  }

  get frameCount(): number {
    return this.manifest.data.frames.length;
  }

  /** Frame `i`'s record (RangeError outside the image's frames). */
  private frameAt(i: number): FrameRecord {
    const frame = this.manifest.data.frames[i];
    if (frame === undefined) throw new RangeError(`frame index ${i} out of range 0..${this.frameCount - 1}`);
    return frame;
  }

  /** The compressed bytes of frame `i` (one zstd frame; see frame-codec.ts). */
  async readFrame(i: number): Promise<Buffer> {
    const frame = this.frameAt(i);
    const { path: dataPath, offset } = this.frameSource(i);
    const fh = this.handle();
    const buf = Buffer.allocUnsafe(frame.compressedLength);
    let done = 0;
    while (done < buf.length) {
      let bytesRead: number;
      try {
        ({ bytesRead } = await fh.read(buf, done, buf.length - done, offset + done));
      } catch (e) {
        throw readFailed(dataPath, e);
      }
      if (bytesRead === 0) {
        // open() checked the size, so the file shrank while we held it.
        throw new GpuckptError('IMAGE_TRUNCATED', `image data ${dataPath} is truncated: ${frameLabel(frame, i)} ends past the end of the file`);
      }
      done += bytesRead;
    }
    return buf;
  }

  /**
   * Where frame `i`'s compressed bytes are, for a reader of its own: a
   * codec worker reads them into a buffer it keeps, where a fresh buffer
   * per frame, read on the main thread and handed over, was a copy and
   * garbage for every frame.
   */
  frameSource(i: number): FrameSource {
    const frame = this.frameAt(i);
    faultPoint('image-read');
    return { path: join(this.path, DATA_FILE), offset: Number(frame.offset), length: frame.compressedLength };
  }

  /** The raw device bytes of frame `i`, checksum-verified (IMAGE_DATA_CORRUPT if damaged). */
  async readFrameData(i: number): Promise<Buffer> {
    const frame = this.frameAt(i);
    const data = decompressFrame(await this.readFrame(i), frame.length, `${this.path}: ${frameLabel(frame, i)}`);
    if (!frame.planes) return data;
    const out = Buffer.allocUnsafe(data.length);
    fromPlanes(data, frame.planes, out);
    return out;
  }

  /**
   * Decompress every frame and check it against its zstd checksum and its
   * length. Reads in file order, fetching the next frame while the current
   * one decompresses.
   */
  async verify(onProgress?: (p: VerifyProgress) => void): Promise<VerifyResult> {
    const frames = this.manifest.data.frames;
    const order = frames.map((_, i) => i).sort((a, b) => (frames[a]!.offset < frames[b]!.offset ? -1 : 1));
    const total = { frames: frames.length, rawBytes: this.manifest.data.rawBytes };
    let rawBytesDone = 0n;
    let next: Promise<Buffer> | undefined = order.length > 0 ? this.readFrame(order[0]!) : undefined;
    try {
      for (let k = 0; k < order.length; k++) {
        const i = order[k]!;
        const compressed = await next!;
        next = k + 1 < order.length ? this.readFrame(order[k + 1]!) : undefined;
        decompressFrame(compressed, frames[i]!.length, `${this.path}: ${frameLabel(frames[i]!, i)}`);
        rawBytesDone += BigInt(frames[i]!.length);
        onProgress?.({ framesDone: k + 1, frames: total.frames, rawBytesDone, rawBytes: total.rawBytes });
      }
    } finally {
      // If we stopped early, the prefetch's outcome no longer matters.
      next?.catch(() => {});
    }
    return { frames: total.frames, rawBytes: rawBytesDone, ok: true };
  }

  async close(): Promise<void> {
    const fh = this.data;
    this.data = undefined;
    await fh?.close();
  }

  private handle(): FileHandle {
    if (!this.data) throw new GpuckptError('INTERNAL', `image ${this.path} was already closed`);
    return this.data;
  }
}

async function readManifest(path: string): Promise<{ manifest: Manifest; sha256: Buffer }> {
  try {
    const st = await stat(path);
    if (!st.isDirectory()) throw new GpuckptError('IMAGE_NOT_AN_IMAGE', `${path} is not an image (not a directory)`);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') throw new GpuckptError('IMAGE_MISSING', `no image at ${path}`, { cause: e });
    throw readFailed(path, e);
  }

  const manifestPath = join(path, MANIFEST_FILE);
  let fh: FileHandle;
  try {
    fh = await open(manifestPath, 'r');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') {
      const entries = await readdir(path).catch((err: unknown) => {
        throw readFailed(path, err);
      });
      if (entries.length === 0) throw new GpuckptError('IMAGE_MISSING', `no image at ${path} (empty directory)`);
      throw new GpuckptError('IMAGE_NOT_AN_IMAGE', `${path} is not an image (no ${MANIFEST_FILE} file)`);
    }
    if (code === 'EISDIR') throw new GpuckptError('IMAGE_NOT_AN_IMAGE', `${path} is not an image (${MANIFEST_FILE} is a directory)`);
    throw readFailed(manifestPath, e);
  }
  try {
    const st = await fh.stat();
    if (!st.isFile()) throw new GpuckptError('IMAGE_NOT_AN_IMAGE', `${path} is not an image (${MANIFEST_FILE} is not a regular file)`);
    if (st.size > MANIFEST_HEADER_LENGTH + MAX_MANIFEST_PAYLOAD) {
      // Do not read a huge file into memory; its first bytes still say whether it is ours at all.
      const head = await readAll(fh, 12, manifestPath);
      try {
        decodeManifest(head, manifestPath);
      } catch (e) {
        if (isGpuckptError(e, 'IMAGE_NOT_AN_IMAGE') || isGpuckptError(e, 'IMAGE_VERSION')) throw e;
      }
      throw new GpuckptError('IMAGE_CORRUPT', `image manifest ${manifestPath} is corrupt: ${st.size} bytes is too large for a manifest`);
    }
    const bytes = await readAll(fh, st.size, manifestPath);
    // decodeManifest checked the header's SHA-256 against the payload.
    return { manifest: decodeManifest(bytes, manifestPath), sha256: Buffer.from(bytes.subarray(16, MANIFEST_HEADER_LENGTH)) };
  } finally {
    await fh.close().catch(() => {});
  }
}

async function openData(path: string, manifest: Manifest): Promise<FileHandle> {
  const dataPath = join(path, DATA_FILE);
  let fh: FileHandle;
  try {
    fh = await open(dataPath, 'r');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new GpuckptError('IMAGE_TRUNCATED', `image ${path} is incomplete: ${DATA_FILE} is missing`);
    if (code === 'EISDIR') throw new GpuckptError('IMAGE_CORRUPT', `image ${path} is corrupt: ${DATA_FILE} is a directory`);
    throw readFailed(dataPath, e);
  }
  try {
    const st = await fh.stat({ bigint: true });
    if (!st.isFile()) throw new GpuckptError('IMAGE_CORRUPT', `image ${path} is corrupt: ${DATA_FILE} is not a regular file`);
    const need = manifest.data.storedBytes;
    if (st.size < need) {
      throw new GpuckptError('IMAGE_TRUNCATED', `image data ${dataPath} is truncated: ${st.size} of ${need} bytes`);
    }
    if (st.size > need) {
      throw new GpuckptError('IMAGE_CORRUPT', `image data ${dataPath} is corrupt: ${st.size - need} bytes after the last frame`);
    }
    return fh;
  } catch (e) {
    await fh.close().catch(() => {});
    if (isGpuckptError(e)) throw e;
    throw readFailed(dataPath, e);
  }
}

/** Read exactly `length` bytes from the start (or fewer if the file is shorter). */
async function readAll(fh: FileHandle, length: number, pathForMessages: string): Promise<Buffer> {
  const buf = Buffer.allocUnsafe(length);
  let done = 0;
  try {
    while (done < length) {
      const { bytesRead } = await fh.read(buf, done, length - done, done);
      if (bytesRead === 0) break;
      done += bytesRead;
    }
  } catch (e) {
    throw readFailed(pathForMessages, e);
  }
  return buf.subarray(0, done);
}

