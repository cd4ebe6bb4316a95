/**
 * Packing CRIU's page images (criu-pages.ts) as CRIU writes them: CRIU
 * appends each pages-N.img in order, so a frame whose bytes are all there
 * is final, and is compressed while CRIU dumps the rest (a 2-rank job's
 * pack took 0.7 s after its dump, one process after another). What is left
 * when CRIU is done (the last frames) is packed then, the index written and
 * the raw files removed (never synced: their page cache is dropped
 * unwritten). The packed files' writeback is started as they grow, so
 * that the sync at CRIU's gate finds little left. On a failure the raw
 * files stay as CRIU wrote them, which restore takes as they are. CRIU
 * may write them elsewhere than the packed ones go (rawDir).
 */
import { closeSync, openSync, readdirSync, rmSync, statSync, writeFileSync, writeSync } from 'node:fs';
import { unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { GpuckptError } from '../base/errors.js';
import { faultPoint } from '../base/faults.js';
import { Limiter } from '../base/limiter.js';
import { osErrorText } from '../image/os-error.js';
import { PAGE_BYTES } from '../adapters/criu-memory.js';
import { WRITEBACK_EVERY } from '../image/writer.js';
import { native } from '../../native/index.js';
import { log } from '../base/log.js';
import { CodecPool, defaultWorkerCount } from './codec-pool.js';
import { addRun } from './criu-zero-pages.js';
import { FRAME_BYTES, PACKED, PACKED_INDEX, PAGES, PACKED_FORMAT, summaryOf, type PackedFile, type PagesSummary } from './criu-pages.js';

/** How often the directory is looked at while CRIU writes. */
const FOLLOW_MS = 20;

interface FileState extends PackedFile {
  /** Frames handed to the workers so far. */
  launched: number;
  /** The last frame's write: each waits for the one before, so the file is written in order. */
  tail: Promise<void>;
  fd?: number;
  at: number;
  /** Bytes written since writeback was last started. */
  unflushed: number;
  /** The writeback started last, until it returns (fd stays open meanwhile). */
  flush?: Promise<void>;
}

/**
 * Workers for packing while CRIU dumps (follow), beside pool images still
 * being compressed: a quarter of the cores. Every core's worth, started
 * while the PyTorch job's pool image compressed, took 0.37 s to start and
 * 0.2 s to end once CRIU was done (2x H200). Once the pool images are done,
 * the packer grows to every core (grow).
 */
export function followingWorkers(): number {
  return Math.ceil(defaultWorkerCount() / 4);
}

export class CriuPagesPacker {
  private readonly files = new Map<string, FileState>();
  /** The workers it started with, then those grow() added. */
  private readonly pools: CodecPool[];
  /** Set once finish() or abandon() closes the pools: none is added after. */
  private closing = false;
  private readonly limiter: Limiter;
  private readonly t0 = performance.now();
  private timer: NodeJS.Timeout | undefined;
  private failure: unknown;
  /** Set where the kernel or file system refuses sync_file_range: the final sync writes everything. */
  private noWriteback = false;
  /** Frames handed out, and those of them not written yet: the trace's view of whether the workers kept up with CRIU. */
  private framesLaunched = 0;
  private framesPending = 0;
  /** Raw files finish() could not remove once packed, each with why: the image keeps them beside their packed form. */
  readonly rawLeft: string[] = [];

  /** Where CRIU writes its raw pages: dir, or a scratch of huge pages (criu-scratch.ts, makeDumpScratch). */
  private readonly rawDir: string;

  constructor(
    private readonly dir: string,
    private readonly opts: { level?: number; workers?: number; codecs?: CodecPool; startWriteback?: (fd: number) => Promise<void>; rawDir?: string } = {},
  ) {
    this.rawDir = opts.rawDir ?? dir;
    this.pools = [opts.codecs ?? new CodecPool(opts.workers)];
    // Compressed in parallel, a window of frames ahead of the writes.
    this.limiter = new Limiter(2 * this.workers);
  }

  private get workers(): number {
    return this.pools.reduce((n, p) => n + p.size, 0);
  }

  /**
   * The cores the pool images used are free (their frames are all
   * compressed): up to workers in all from now on. A 2-rank job's CRIU
   * wrote 2.4 GB faster than a quarter of the cores packed it, leaving
   * them 153 frames, 0.33 s of packing after its end (2x H200).
   */
  grow(workers: number): void {
    if (this.opts.codecs || this.closing || workers <= this.workers) return;
    this.pools.push(new CodecPool(workers - this.workers));
    this.limiter.setLimit(2 * this.workers);
  }

  /** The pool whose workers have the fewest frames each. */
  private idlest(): CodecPool {
    return this.pools.reduce((a, b) => (b.inFlight / b.size < a.inFlight / a.size ? b : a));
  }

  private async closePools(): Promise<void> {
    this.closing = true;
    if (!this.opts.codecs) await Promise.all(this.pools.map((p) => p.close()));
  }

  /** While CRIU writes: each frame compressed once its bytes are all there. */
  follow(): this {
    const look = () => {
      if (this.failure !== undefined) return;
      try {
        this.scan(false);
      } catch (e) {
        this.failure ??= e;
      }
      this.timer = setTimeout(look, FOLLOW_MS);
      this.timer.unref();
    };
    look();
    return this;
  }

  /** CRIU is done: the rest packed, the index written, the raw files removed. */
  async finish(): Promise<PagesSummary> {
    clearTimeout(this.timer);
    try {
      const [behind, cut, t0] = [this.framesPending, this.framesLaunched, performance.now()];
      if (this.failure === undefined) this.scan(true);
      const files = [...this.files.values()];
      await this.settled();
      log('debug', 'criu pages pack', `CRIU done: ${behind} frames in the workers and ${this.framesLaunched - cut} not cut yet, of ${this.framesLaunched}; written ${((performance.now() - t0) / 1000).toFixed(3)} s later (${this.pools.map((p) => p.size).join(' + ')} workers)`);
      if (this.failure !== undefined) throw this.failure;
      for (const f of files) if (f.fd === undefined) f.fd = openSync(join(this.dir, f.name + PACKED), 'w', 0o600); // an empty file
      this.closeAll();
      const index = files.map(({ name, rawBytes, frames, zeroPages }) => ({ name, rawBytes, frames, zeroPages }));
      writeFileSync(join(this.dir, PACKED_INDEX), JSON.stringify({ format: PACKED_FORMAT, frameBytes: FRAME_BYTES, files: index }), { mode: 0o600 });
      // The packed files are the image's from here on: some raw files may be
      // gone, so a failure no longer falls back on them.
      await this.removeRaw(files);
      return summaryOf(index, this.t0);
    } catch (e) {
      this.removePacked();
      throw new GpuckptError('IMAGE_WRITE_FAILED', `cannot compress CRIU's pages: ${osErrorText(e)}`, { cause: e });
    } finally {
      await this.closePools();
    }
  }

  /**
   * CRIU's raw files, packed, removed at once: each unlink frees its file's
   * page cache on the thread that makes it (a 2-rank job's 17 files, 2.6 GB,
   * in 0.06-0.07 s on 2x H200). One that cannot go stays, in rawLeft: the
   * unpacking passes by a raw file the index packs.
   */
  private async removeRaw(files: FileState[]): Promise<void> {
    const u0 = performance.now();
    const removed = await Promise.allSettled(
      files.map(async (f) => {
        faultPoint('criu-pages-unlink');
        await unlink(join(this.rawDir, f.name));
      }),
    );
    removed.forEach((r, i) => r.status === 'rejected' && this.rawLeft.push(`${files[i]!.name} (${osErrorText(r.reason)})`));
    log('debug', 'criu pages pack', `${files.length - this.rawLeft.length} raw files removed in ${((performance.now() - u0) / 1000).toFixed(3)} s`);
  }

  /** Given up (the dump failed): nothing more is compressed; what was packed is removed, CRIU's files are left. */
  async abandon(): Promise<void> {
    clearTimeout(this.timer);
    this.failure ??= new Error('given up');
    await this.settled();
    this.removePacked();
    await this.closePools();
  }

  /** Every frame handed out written (or given up), and the writeback started last returned: the fds may close. */
  private async settled(): Promise<void> {
    await Promise.all([...this.files.values()].map((f) => f.tail));
    await Promise.all([...this.files.values()].map((f) => f.flush));
  }

  /** Every pages file's frames not handed out yet: the whole ones, or (last) all. */
  private scan(last: boolean): void {
    for (const name of readdirSync(this.rawDir)) {
      if (!PAGES.test(name)) continue;
      const size = statSync(join(this.rawDir, name)).size;
      let f = this.files.get(name);
      if (!f) this.files.set(name, (f = { name, rawBytes: 0, frames: [], zeroPages: [], launched: 0, tail: Promise.resolve(), at: 0, unflushed: 0 }));
      if (size < f.launched * FRAME_BYTES) throw new Error(`${name} shrank while CRIU wrote it`);
      f.rawBytes = size;
      const ready = last ? Math.ceil(size / FRAME_BYTES) : Math.floor(size / FRAME_BYTES);
      for (; f.launched < ready; f.launched++) this.launch(f, f.launched * FRAME_BYTES, Math.min(FRAME_BYTES, size - f.launched * FRAME_BYTES));
    }
  }

  private launch(f: FileState, offset: number, length: number): void {
    this.framesLaunched++;
    this.framesPending++;
    const compressed = this.limiter.run(() => this.idlest().compressFile(join(this.rawDir, f.name), offset, length, this.opts.level ?? 1));
    compressed.catch(() => undefined); // taken in order below
    f.tail = f.tail.then(async () => {
      const { data, zeroPages } = await compressed;
      if (this.failure !== undefined) return;
      for (let z = 0; z < zeroPages.length; z += 2) addRun(f.zeroPages!, offset / PAGE_BYTES + zeroPages[z]!, zeroPages[z + 1]!);
      f.fd ??= openSync(join(this.dir, f.name + PACKED), 'w', 0o600);
      for (let done = 0; done < data.length; ) done += writeSync(f.fd, data, done, data.length - done, f.at + done);
      f.at += data.length;
      f.frames.push(data.length);
      f.unflushed += data.length;
      this.startWriteback(f);
    }).catch((e: unknown) => {
      this.failure ??= e;
    }).finally(() => this.framesPending--);
  }

  /**
   * Queues what f has written for the disk, one call at a time (as the
   * image writer does): the kernel would start only past
   * dirty_background_ratio. A failed call only costs the final sync's
   * time; an I/O error shows there again.
   */
  private startWriteback(f: FileState): void {
    if (this.noWriteback || f.flush || f.unflushed < WRITEBACK_EVERY) return;
    f.unflushed = 0;
    f.flush = (this.opts.startWriteback ?? ((fd: number) => native().startWriteback(fd)))(f.fd!)
      .catch(() => {
        this.noWriteback = true;
      })
      .finally(() => {
        f.flush = undefined;
      });
  }

  private closeAll(): void {
    for (const f of this.files.values()) {
      if (f.fd !== undefined) closeSync(f.fd);
      f.fd = undefined;
    }
  }

  private removePacked(): void {
    this.closeAll();
    for (const f of this.files.values()) rmSync(join(this.dir, f.name + PACKED), { force: true });
    rmSync(join(this.dir, PACKED_INDEX), { force: true });
  }
}

/** Packs every pages-N.img of dir (CRIU done with it) into pages-N.img.zst and removes the raw one. */
export function packCriuPages(dir: string, opts: { level?: number; workers?: number; codecs?: CodecPool } = {}): Promise<PagesSummary> {
  return new CriuPagesPacker(dir, opts).finish();
}
