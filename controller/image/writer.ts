/**
 * Writing an image so that it is either complete at its path or absent.
 *
 * Everything is written into a hidden working directory next to the target
 * (see temp-dirs.ts); commit makes it durable (fsync data, manifest, the
 * directory) and only then renames it into place and fsyncs the parent. A
 * crash at any point leaves either no image or the complete one; a failed
 * write removes the working directory and reports IMAGE_WRITE_FAILED.
 *
 * Files are 0600 and the directory 0700: an image is a copy of the process's
 * device memory and may hold anything the process held.
 */
import { chmod, lstat, mkdir, open, readdir, rename, rm } from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { GpuckptError, isGpuckptError } from '../base/errors.js';
import { DATA_FILE, MANIFEST_FILE, MANIFEST_MAGIC } from './format.js';
import { encodeManifest } from './manifest.js';
import type { Manifest } from './manifest-types.js';
import { isOsError, osErrorText } from './os-error.js';
import { removeStaleTempDirs, tempDirName } from './temp-dirs.js';
import { fsyncDir } from './durable.js';
import { faultPoint } from '../base/faults.js';
import { PhaseClock, type Phases } from '../base/phase-clock.js';
import { native } from '../../native/index.js';

export interface ImageWriterOptions {
  /** Replace an existing image at the target path (only an image or an empty directory). */
  force?: boolean;
  /** Appended bytes between two background flushes (default WRITEBACK_EVERY, or FLUSH_EVERY where writeback cannot be started). */
  flushEveryBytes?: number;
}

/**
 * Test seam, not public API: lets tests substitute the file a writer writes
 * (e.g. /dev/full, which fails every write with a real ENOSPC) to exercise
 * the failure path honestly. Never set outside tests.
 */
export const writerTestHooks: {
  openFile?: (path: string, role: 'data' | 'manifest') => Promise<FileHandle>;
  startWriteback?: (fh: FileHandle) => Promise<void>;
} = {};

type State = 'open' | 'committing' | 'committed' | 'aborted';

/** Appended bytes between two starts of writeback: the disk gets work from the first frames on. */
export const WRITEBACK_EVERY = 16 * 2 ** 20;
/** Where writeback cannot be started: appended bytes between two background fdatasyncs, large enough that each keeps the disk busy. */
export const FLUSH_EVERY = 256 * 2 ** 20;

export class ImageWriter {
  /** Absolute path the image will have once committed. */
  readonly path: string;
  /** Absolute path of the hidden working directory. */
  readonly tempPath: string;

  /** Where commit's time went: appends (the last writes and flush), sync (data and manifest), directory, install. */
  commitPhases: Phases = {};
  private state: State = 'open';
  private failure: GpuckptError | undefined;
  private nextOffset = 0n;
  /** Appends in offset order, until written: what bounds writtenPrefix. */
  private readonly unwritten: { end: bigint; written: boolean }[] = [];
  private prefix = 0n;
  private readonly inFlight = new Set<Promise<unknown>>();
  /** Bytes appended since the last background flush started (see flushInBackground). */
  private unflushed = 0;
  private flushing = false;
  /** How a background flush gets the disk writing: sync_file_range, or fdatasync where that is refused. */
  private flushBy: 'writeback' | 'datasync' = 'writeback';
  /** The working directory's removal, once aborted. */
  private cleaning: Promise<void> | undefined;
  /** What cleanup removes: the working directory, or the final path once renamed there. */
  private workDir: string;
  /** During a forced replace: where the old image waits, to be put back if we fail. */
  private oldImageAside: string | undefined;

  private constructor(
    path: string,
    tempPath: string,
    private readonly force: boolean,
    private data: FileHandle | undefined,
    private readonly flushEvery: number | undefined,
  ) {
    this.path = path;
    this.tempPath = tempPath;
    this.workDir = tempPath;
  }

  /**
   * Start writing an image at `finalPath`. Fails early with IMAGE_EXISTS if
   * something is there (and force is not given, or it is not an image), so no
   * checkpoint work is wasted; commit checks again.
   */
  static async create(finalPath: string, opts: ImageWriterOptions = {}): Promise<ImageWriter> {
    const target = resolve(finalPath);
    const name = basename(target);
    if (name === '') throw new GpuckptError('BAD_ARGUMENT', `cannot write an image at ${target}`);
    const parent = dirname(target);
    const force = opts.force === true;
    await refuseExisting(target, force);
    await removeStaleTempDirs(parent);

    const tempPath = join(parent, tempDirName(name));
    let data: FileHandle | undefined;
    try {
      await mkdir(tempPath, { mode: 0o700 });
      await chmod(tempPath, 0o700); // mkdir's mode is filtered by the umask
      data = await openForWrite(join(tempPath, DATA_FILE), 'data');
    } catch (e) {
      await data?.close().catch(() => {});
      await rm(tempPath, { recursive: true, force: true }).catch(() => {});
      throw writeFailed(target, e);
    }
    return new ImageWriter(target, tempPath, force, data, opts.flushEveryBytes);
  }

  /** Bytes appended to pool.zst so far (the next frame's offset). */
  get storedBytes(): bigint {
    return this.nextOffset;
  }

  /** Bytes of pool.zst from its start that are written, none still in flight among them: what a stream of the image may send (stream.ts). */
  get writtenPrefix(): bigint {
    return this.prefix;
  }

  /**
   * Append one compressed frame to pool.zst; resolves to its offset. Offsets
   * are assigned in call order, so callers may have several appends in flight
   * (each writes at its own position).
   */
  async appendFrame(compressed: Uint8Array): Promise<bigint> {
    if (this.failure) await this.failedAlready(); // else no await: offsets follow call order
    this.assertOpen('appendFrame');
    faultPoint('image-write');
    const offset = this.nextOffset;
    this.nextOffset += BigInt(compressed.length);
    const mark = { end: this.nextOffset, written: false };
    this.unwritten.push(mark);
    await this.track(writeFully(this.data!, compressed, offset));
    mark.written = true;
    while (this.unwritten[0]?.written) this.prefix = this.unwritten.shift()!.end;
    this.unflushed += compressed.length;
    this.flushInBackground();
    return offset;
  }

  /**
   * Starts writing what was appended to the disk while more is compressed.
   * The kernel starts writeback on its own only past dirty_background_ratio
   * (10 % of host memory: more than most images) or after 30 s, so without
   * this the disk sat idle during compression and commit's fsync wrote the
   * whole image: 16 GiB took 3.2 s to compress, then 3.0 s to sync.
   * sync_file_range queues the pages written since the last call and
   * returns, every WRITEBACK_EVERY bytes, so the disk starts on the first
   * frames; an fdatasync every FLUSH_EVERY bytes, which waits for its
   * writes, left it idle until the first 256 MiB were appended and between
   * two syncs. One at a time, on one of libuv's threads; commit waits for
   * it, and a failure fails the image like a failed write.
   */
  private flushInBackground(): void {
    const every = this.flushEvery ?? (this.flushBy === 'writeback' ? WRITEBACK_EVERY : FLUSH_EVERY);
    if (this.flushing || this.state !== 'open' || !this.data || this.unflushed < every) return;
    this.flushing = true;
    this.unflushed = 0;
    this.track(this.flushOnce(this.data))
      .then(() => {
        this.flushing = false;
        this.flushInBackground();
      })
      .catch(() => {
        // recorded by track: the next append or commit reports it
      });
  }

  /**
   * One background flush. Commit closes the file only once it is done; an
   * abort may close it meanwhile, and the image is then dropped whatever
   * the call on the old fd does.
   */
  private async flushOnce(data: FileHandle): Promise<void> {
    if (this.flushBy === 'datasync') return data.datasync();
    try {
      await (writerTestHooks.startWriteback ?? ((fh) => native().startWriteback(fh.fd)))(data);
    } catch (e) {
      // Not a regular file, or a kernel or file system without it.
      if (!isOsError(e) || !WRITEBACK_REFUSED.has(e.code!)) throw e;
      this.flushBy = 'datasync';
      await data.datasync();
    }
  }

  /**
   * Make the image durable and visible at its path. `manifest.data` must
   * describe exactly the frames appended (storedBytes = bytes appended).
   */
  async commit(manifest: Manifest): Promise<void> {
    // No await when nothing failed: a flush failing in that gap would
    // otherwise be thrown by assertOpen before its cleanup ended.
    if (this.failure) await this.failedAlready();
    this.assertOpen('commit');
    this.state = 'committing';
    const clock = new PhaseClock('image writer');
    try {
      await Promise.all(this.inFlight);
      clock.mark('appends');
      if (manifest.data.storedBytes !== this.nextOffset) {
        throw new GpuckptError(
          'INTERNAL',
          `image manifest says pool.zst holds ${manifest.data.storedBytes} bytes but ${this.nextOffset} were written`,
        );
      }
      const manifestBytes = encodeManifest(manifest); // validates; INTERNAL if the caller built it wrong

      const data = this.data!;
      this.data = undefined;
      // The manifest is written and synced while the data's tail syncs:
      // both are durable before the directory is, whichever ends first.
      const writeManifest = async () => {
        const mf = await openForWrite(join(this.tempPath, MANIFEST_FILE), 'manifest');
        try {
          await writeFully(mf, manifestBytes, 0n);
          await mf.sync();
        } finally {
          await mf.close();
        }
      };
      const syncData = async () => {
        try {
          await data.sync();
        } finally {
          await data.close();
        }
      };
      const synced = await Promise.allSettled([syncData(), writeManifest()]);
      for (const r of synced) if (r.status === 'rejected') throw r.reason;
      clock.mark('sync');
      // The directory entries of both files must be durable before the
      // rename publishes the directory.
      await fsyncDir(this.tempPath);
      clock.mark('directory');
      await this.install();
      clock.mark('install');
      this.commitPhases = clock.phases;
      this.state = 'committed';
    } catch (e) {
      throw await this.fail(e);
    }
  }

  /**
   * Discard everything written. Safe to call at any time and more than once;
   * after a successful commit it does nothing, so `finally { await w.abort() }`
   * is a correct pattern.
   */
  async abort(): Promise<void> {
    if (this.state === 'committed') return;
    if (this.state !== 'aborted') {
      this.state = 'aborted';
      this.cleaning = this.cleanup();
    }
    // A second caller (two writes failing at once) waits for the same cleanup.
    await this.cleaning;
  }

  // ------------------------------------------------------------------ internals

  /** After a failure (a background flush's, say), throws it once the working directory is gone. */
  private async failedAlready(): Promise<void> {
    if (!this.failure) return;
    await this.abort();
    throw this.failure;
  }

  private assertOpen(op: string): void {
    if (this.failure) throw this.failure;
    if (this.state !== 'open') {
      throw new GpuckptError('INTERNAL', `ImageWriter.${op} called on a writer that is ${this.state}`);
    }
  }

  /** Await a write; on failure abort the whole image and report IMAGE_WRITE_FAILED. */
  private async track<T>(p: Promise<T>): Promise<T> {
    const guarded = p.catch(async (e: unknown) => {
      throw await this.fail(e);
    });
    this.inFlight.add(guarded);
    try {
      return await guarded;
    } finally {
      this.inFlight.delete(guarded);
    }
  }

  /** Record the first failure, remove the working directory, and return the error to throw. */
  private async fail(e: unknown): Promise<unknown> {
    if (!this.failure) {
      if (isGpuckptError(e)) this.failure = e;
      else if (isOsError(e)) this.failure = writeFailed(this.path, e);
      else {
        // Not an I/O failure: a bug. Clean up but keep the original error and its stack.
        await this.abort();
        return e;
      }
    }
    await this.abort();
    return this.failure;
  }

  private async cleanup(): Promise<void> {
    const data = this.data;
    this.data = undefined;
    // FileHandle.close waits for operations still running on the handle.
    await data?.close().catch(() => {});
    await rm(this.workDir, { recursive: true, force: true }).catch(() => {});
    if (this.oldImageAside) {
      await rename(this.oldImageAside, this.path).catch(() => {});
      this.oldImageAside = undefined;
    }
  }

  /** Rename the finished directory to its final path (swapping out an old image if forced). */
  private async install(): Promise<void> {
    const parent = dirname(this.path);
    await refuseExisting(this.path, this.force);
    if (await exists(this.path)) {
      // Node has no renameat2(RENAME_EXCHANGE), so the swap is two renames:
      // the old image goes aside under a working-directory name, the new one
      // comes in, then the old is deleted. A crash between the two renames
      // (microseconds) leaves both only as hidden working directories, which a
      // later writer removes as stale; a crash after them leaves the new image.
      const aside = join(parent, tempDirName(basename(this.path)));
      await rename(this.path, aside);
      this.oldImageAside = aside;
      await rename(this.tempPath, this.path);
      this.workDir = this.path;
      await fsyncDir(parent);
      this.oldImageAside = undefined;
      await rm(aside, { recursive: true, force: true }).catch(() => {
        // The new image is in place; a leftover old copy is removed as stale later.
      });
      return;
    }
    // rename(2) would also silently replace an *empty* directory created at
    // the path since the check above; a non-empty one makes it fail below.
    try {
      await rename(this.tempPath, this.path);
    } catch (e) {
      // Something appeared at the path since the check above.
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'ENOTEMPTY' || code === 'EEXIST' || code === 'ENOTDIR' || code === 'EISDIR') {
        throw new GpuckptError('IMAGE_EXISTS', `image ${this.path} already exists`, { cause: e });
      }
      throw e;
    }
    // Until the parent is synced the rename may not survive a crash; if that
    // fails, cleanup removes the image again so a failure leaves nothing.
    this.workDir = this.path;
    await fsyncDir(parent);
  }
}

/** sync_file_range's errors that mean "not here" rather than a failed write. */
const WRITEBACK_REFUSED = new Set(['ENOSYS', 'EINVAL', 'ESPIPE', 'EOPNOTSUPP']);

function writeFailed(target: string, e: unknown): GpuckptError {
  if (isGpuckptError(e)) return e;
  return new GpuckptError('IMAGE_WRITE_FAILED', `cannot write image ${target}: ${osErrorText(e)}`, { cause: e });
}

/**
 * IMAGE_EXISTS unless the path is free or may be replaced. Even with force,
 * only a gpuckpt image or an empty directory is replaced: a mistyped path
 * must not delete someone's data.
 */
async function refuseExisting(target: string, force: boolean): Promise<void> {
  if (!(await exists(target))) return;
  if (!force) throw new GpuckptError('IMAGE_EXISTS', `image ${target} already exists`);
  if (!(await isReplaceable(target))) {
    throw new GpuckptError('IMAGE_EXISTS', `${target} exists and is not a gpuckpt image; refusing to replace it`);
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await lstat(path);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw writeFailed(path, e);
  }
}

/** An empty directory, or one whose manifest starts like ours (possibly damaged further on). */
async function isReplaceable(dir: string): Promise<boolean> {
  try {
    if (!(await lstat(dir)).isDirectory()) return false;
    const entries = await readdir(dir);
    if (entries.length === 0) return true;
    if (!entries.includes(MANIFEST_FILE)) return false;
    const fh = await open(join(dir, MANIFEST_FILE), 'r');
    try {
      const head = Buffer.alloc(MANIFEST_MAGIC.length);
      const { bytesRead } = await fh.read(head, 0, head.length, 0);
      return head.subarray(0, bytesRead).equals(MANIFEST_MAGIC.subarray(0, bytesRead));
    } finally {
      await fh.close();
    }
  } catch {
    return false;
  }
}

async function openForWrite(path: string, role: 'data' | 'manifest'): Promise<FileHandle> {
  if (writerTestHooks.openFile) return writerTestHooks.openFile(path, role);
  // 'wx': the working directory is fresh, so an existing file means something is badly wrong.
  const fh = await open(path, 'wx', 0o600);
  try {
    await fh.chmod(0o600); // open's mode is filtered by the umask
  } catch (e) {
    await fh.close().catch(() => {});
    throw e;
  }
  return fh;
}

/** write(2) may write less than asked; loop until every byte is at its position. */
async function writeFully(fh: FileHandle, bytes: Uint8Array, position: bigint): Promise<void> {
  let done = 0;
  while (done < bytes.length) {
    const { bytesWritten } = await fh.write(bytes, done, bytes.length - done, Number(position) + done);
    if (bytesWritten === 0) {
      throw Object.assign(new Error('EIO: write returned 0 bytes, write'), { code: 'EIO' });
    }
    done += bytesWritten;
  }
}
