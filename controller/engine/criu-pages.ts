/**
 * CRIU's page images (pages-N.img: most of a whole-process image, half of
 * it zero pages on a PyTorch job) kept as zstd frames: packed after the
 * dump, with where the zero pages are; checked and unpacked before a
 * restore into a scratch directory that CRIU reads, where zero pages are
 * never written (holes, or a huge page's zeros), and those of private
 * anonymous memory are left out with the pagemaps rewritten to match
 * (criu-zero-pages.ts). The image itself is never written by a restore.
 */
import { closeSync, existsSync, ftruncateSync, openSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { GpuckptError } from '../base/errors.js';
import { Limiter } from '../base/limiter.js';
import { log, logEnabled } from '../base/log.js';
import { PhaseClock } from '../base/phase-clock.js';
import { round } from '../base/units.js';
import { readRange } from '../image/file-range.js';
import { CodecPool, describeSpent } from './codec-pool.js';
import { makeScratch } from './criu-scratch.js';
import { frameLayout, zeroDropTasks, type PageRuns } from './criu-zero-pages.js';
import { PAGE_BYTES } from '../adapters/criu-memory.js';

/** Beside the packed files in CRIU's directory: what they hold. */
export const PACKED_INDEX = 'gpuckpt-pages.json';
export const PACKED_FORMAT = 'gpuckpt-criu-pages/1';
export const FRAME_BYTES = 4 << 20;
export const PACKED = '.zst';
export const PAGES = /^pages-\d+\.img$/;

export interface PackedFile {
  /** CRIU's name for it; stored as name + '.zst'. */
  name: string;
  rawBytes: number;
  /** Compressed length of each frame, in order; frame k holds raw bytes [k*frameBytes, ...). */
  frames: number[];
  /** Its runs of all-zero pages, [first, count, ...] (criu-zero-pages.ts); absent in images from before them. */
  zeroPages?: PageRuns;
}

interface PackedIndex {
  format: string;
  frameBytes: number;
  files: PackedFile[];
}

export interface PagesSummary {
  files: number;
  rawBytes: number;
  storedBytes: number;
  /** Of rawBytes, the zero pages a restore left out of CRIU's files (criu-zero-pages.ts). */
  leftOutBytes?: number;
  seconds: number;
}

function sizesOf(files: PackedFile[]): Omit<PagesSummary, 'seconds'> {
  return {
    files: files.length,
    rawBytes: files.reduce((n, f) => n + f.rawBytes, 0),
    storedBytes: files.reduce((n, f) => n + f.frames.reduce((a, b) => a + b, 0), 0),
  };
}

export function summaryOf(files: PackedFile[], t0: number): PagesSummary {
  return { ...sizesOf(files), seconds: round((performance.now() - t0) / 1000) };
}

/** The index of dir's packed pages, checked against the files it names; undefined when CRIU's pages are raw. */
export function readPackedIndex(dir: string): PackedIndex | undefined {
  const path = join(dir, PACKED_INDEX);
  if (!existsSync(path)) return undefined;
  const corrupt = (why: string) => new GpuckptError('IMAGE_DATA_CORRUPT', `image data is corrupt: ${path}: ${why}`);
  let index: PackedIndex;
  try {
    index = JSON.parse(readFileSync(path, 'utf8')) as PackedIndex;
  } catch (e) {
    throw corrupt(`not JSON (${(e as Error).message})`);
  }
  if (index?.format !== PACKED_FORMAT) throw corrupt(`format ${JSON.stringify(index?.format)}, expected ${PACKED_FORMAT}`);
  if (!Number.isSafeInteger(index.frameBytes) || index.frameBytes <= 0 || index.frameBytes > 64 << 20 || !Array.isArray(index.files)) throw corrupt('bad frame size or file list');
  for (const f of index.files) {
    if (typeof f?.name !== 'string' || !PAGES.test(f.name) || !Number.isSafeInteger(f.rawBytes) || f.rawBytes < 0 || !Array.isArray(f.frames)) throw corrupt('bad file entry');
    if (f.frames.length !== Math.ceil(f.rawBytes / index.frameBytes)) throw corrupt(`${f.name}: ${f.frames.length} frames for ${f.rawBytes} bytes`);
    if (!f.frames.every((n) => Number.isSafeInteger(n) && n > 0)) throw corrupt(`${f.name}: bad frame length`);
    if (f.zeroPages !== undefined && !areRuns(f.zeroPages, Math.floor(f.rawBytes / PAGE_BYTES))) throw corrupt(`${f.name}: bad zero pages`);
    const stored = join(dir, f.name + PACKED);
    const size = existsSync(stored) ? statSync(stored).size : -1;
    const expected = f.frames.reduce((a, b) => a + b, 0);
    if (size !== expected) throw new GpuckptError('IMAGE_TRUNCATED', `image is truncated: ${stored} holds ${size < 0 ? 'nothing' : `${size} bytes`}, ${expected} expected`);
  }
  return index;
}

/** True for page runs, ascending and apart, within pages. */
function areRuns(runs: unknown, pages: number): boolean {
  if (!Array.isArray(runs) || runs.length % 2) return false;
  for (let i = 0, end = 0; i < runs.length; i += 2) {
    const [first, count] = [runs[i] as unknown, runs[i + 1] as unknown];
    if (!Number.isSafeInteger(first) || !Number.isSafeInteger(count) || (first as number) < end || (count as number) <= 0) return false;
    end = (first as number) + (count as number) + 1;
    if (end - 1 > pages) return false;
  }
  return true;
}

/** What dir's packed pages hold (inspect); undefined when CRIU's pages are raw or absent. */
export function describePacked(dir: string): Omit<PagesSummary, 'seconds'> | undefined {
  const index = readPackedIndex(dir);
  return index && sizesOf(index.files);
}

/** Every frame of index in order: the file, where it lies, what it holds. */
function framesOf(dir: string, index: PackedIndex) {
  return index.files.flatMap((f) => {
    let at = 0;
    return f.frames.map((length, k) => {
      const frame = { src: join(dir, f.name + PACKED), srcOffset: at, srcLength: length, name: f.name, dstOffset: k * index.frameBytes, rawLength: Math.min(index.frameBytes, f.rawBytes - k * index.frameBytes), what: `${f.name}${PACKED} frame ${k}` };
      at += length;
      return frame;
    });
  });
}

/** Each packed file's runs of zero pages, by name (none for images from before them). */
function zeroRunsOf(index: PackedIndex): Map<string, PageRuns> {
  return new Map(index.files.filter((f) => f.zeroPages?.length).map((f) => [f.name, f.zeroPages!]));
}

type Frame = ReturnType<typeof framesOf>[number];

/**
 * For frames asked in file order: how each lands without the pages in its
 * file's runs (frameLayout), its keep ranges within its bytes (a last,
 * partial page is never in a run); undefined for a file without runs.
 */
function frameLayouts(runsOf: Map<string, PageRuns>): (f: Frame) => { keep: number[]; dstPage: number } | undefined {
  const cursors = new Map<string, { at: number; before: number }>();
  return (f) => {
    const runs = runsOf.get(f.name);
    if (!runs) return undefined;
    if (!cursors.has(f.name)) cursors.set(f.name, { at: 0, before: 0 });
    const { keep, dstPage } = frameLayout(runs, f.dstOffset / PAGE_BYTES, Math.ceil(f.rawLength / PAGE_BYTES), cursors.get(f.name)!);
    return { keep: keep.map((b) => Math.min(b, f.rawLength)), dstPage };
  };
}

/** Proves every packed frame of dir intact, and its zero pages zero (gpuckpt inspect); nothing when CRIU's pages are raw. */
export async function verifyCriuPages(dir: string, codecs: CodecPool): Promise<void> {
  const index = readPackedIndex(dir);
  if (!index) return;
  const limiter = new Limiter(2 * codecs.size); // compressed bytes read ahead of the workers
  const layout = frameLayouts(zeroRunsOf(index));
  await Promise.all(
    framesOf(dir, index).map((f) => {
      const keep = layout(f)?.keep;
      return limiter.run(() => codecs.verify(readRange(f.src, f.srcOffset, f.srcLength, Buffer.allocUnsafe(f.srcLength)), f.rawLength, f.what, keep));
    }),
  );
}

/**
 * What CRIU writes into its directory at a restore (O_TRUNC, following
 * links): never linked, or a restore would write into the image where a
 * plain `criu restore` had left them.
 */
const WRITTEN_BY_RESTORE = new Set(['stats-restore', 'restore.log']);

/** A directory CRIU restores from: dir's files linked, its packed pages unpacked; removed by cleanup(). */
export interface CriuScratch {
  dir: string;
  /** On a tmpfs of its own with huge pages (criu-scratch.ts): no holes there. */
  huge: boolean;
  pages?: PagesSummary;
  cleanup(): Promise<void>;
}

/**
 * Unpacks dir (CRIU's part of image) for a restore (until signal aborts
 * it) into a scratch directory (criu-scratch.ts). Every frame is checked
 * first by zstd: a damaged image is refused before any process runs. Zero pages of
 * private anonymous memory are left out of each pages file that holds at
 * least leaveOutZerosFrom bytes of them (default PLAN_MIN_ZERO_BYTES).
 */
export async function unpackCriuDir(dir: string, opts: { workers?: number; codecs?: CodecPool; signal?: AbortSignal; leaveOutZerosFrom?: number } = {}): Promise<CriuScratch> {
  const t0 = performance.now();
  const clock = new PhaseClock('criu pages unpack', t0); // the trace's steps
  const index = readPackedIndex(dir);
  clock.mark('index');
  // Room for every page: the plan of what is left out comes later.
  const { dir: scratch, remove: cleanup, huge } = await makeScratch(index ? sizesOf(index.files).rawBytes : 0, index?.files.length ?? 0, dirname(dir));
  try {
    if (!index) {
      linkCriuFiles(dir, scratch, undefined, new Map()); // CRIU's pages raw: taken where they are
      return { dir: scratch, huge, cleanup };
    }
    const codecs = opts.codecs ?? new CodecPool(opts.workers);
    try {
      // The files the plan may leave pages out of (planned) are unpacked
      // last. Their plans go to the workers first, a file each (the 2-rank
      // DDP job's two pagemaps had taken 0.10-0.15 s one after the other on
      // this thread, which the restore's checks waited for: 2x H200), then
      // the other files' frames, unpacked meanwhile.
      const zero = planned(index, opts.leaveOutZerosFrom ?? PLAN_MIN_ZERO_BYTES);
      const tasks = zero.size ? zeroDropTasks(dir, zero, new Map(index.files.map((f) => [f.name, f.rawBytes]))) : [];
      const plans = tasks.map((t) => codecs.planZeroDrop(dir, t));
      for (const p of plans) p.catch(() => undefined); // taken below
      const frames = framesOf(dir, index);
      const queued = performance.now();
      const done = unpackFiles(scratch, index.files.filter((f) => !zero.has(f.name)), frames, codecs, new Map());
      clock.mark('scratch');
      const drops = (await Promise.all(plans)).flatMap((d) => d ?? []);
      clock.mark('plan');
      if (logEnabled('debug'))
        log('debug', 'criu pages unpack', `${index.files.reduce((n, f) => n + (f.zeroPages?.length ?? 0) / 2, 0)} zero runs in the index; ${drops.reduce((n, d) => n + d.dropped.length / 2, 0)} runs left out, pagemaps of ${drops.reduce((n, d) => n + d.pagemap.bytes.length, 0)} bytes written`);
      linkCriuFiles(dir, scratch, index, new Map(drops.map((d) => [d.pagemap.name, d.pagemap.bytes])));
      const dropped = new Map(drops.map((d) => [d.file, d.dropped]));
      done.push(...unpackFiles(scratch, index.files.filter((f) => zero.has(f.name)), frames, codecs, dropped));
      // Given up (the restore was refused meanwhile): the queued frames are
      // dropped by close(), which waits only for those under way.
      const given = new Promise<never>((_, rej) => {
        const stop = () => rej(new GpuckptError('INTERNAL', 'unpacking given up'));
        if (opts.signal?.aborted) stop();
        opts.signal?.addEventListener('abort', stop, { once: true });
      });
      given.catch(() => undefined);
      const all = Promise.all(done);
      await Promise.race([all, given]);
      clock.mark('frames');
      if (logEnabled('debug')) log('debug', 'criu pages unpack', describeSpent(await all, performance.now() - queued));
      const leftOutBytes = [...dropped.values()].reduce((n, runs) => n + runsPages(runs) * PAGE_BYTES, 0);
      return { dir: scratch, huge, pages: { ...summaryOf(index.files, t0), ...(leftOutBytes ? { leftOutBytes } : {}) }, cleanup };
    } finally {
      if (!opts.codecs) await codecs.close();
    }
  } catch (e) {
    await cleanup();
    throw e;
  }
}

/** dir's files but the packed pages and what a restore writes linked into scratch, or written there where rewritten has them (by name). */
function linkCriuFiles(dir: string, scratch: string, index: PackedIndex | undefined, rewritten: Map<string, Buffer>): void {
  // A raw file the index packs is one the checkpoint could not remove: the packed one stands for it.
  const packed = new Set(index?.files.flatMap((f) => [f.name + PACKED, f.name]));
  for (const name of readdirSync(dir)) {
    if (name === PACKED_INDEX || packed.has(name) || WRITTEN_BY_RESTORE.has(name)) continue;
    const bytes = rewritten.get(name);
    if (bytes) writeFileSync(join(scratch, name), bytes, { mode: 0o600, flag: 'wx' });
    else symlinkSync(join(dir, name), join(scratch, name));
  }
}

/**
 * files made in scratch, each its size less the pages dropped leaves out,
 * and their frames queued to the workers in the order they were packed
 * (the workers go on while the event loop is busy with the restore's
 * checks). A frame's failure is taken when all are awaited, or dropped
 * with a failure before that.
 */
function unpackFiles(scratch: string, files: PackedFile[], frames: Frame[], codecs: CodecPool, dropped: Map<string, PageRuns>): ReturnType<CodecPool['decompressToFile']>[] {
  for (const f of files) {
    const fd = openSync(join(scratch, f.name), 'wx', 0o600);
    try {
      ftruncateSync(fd, f.rawBytes - runsPages(dropped.get(f.name) ?? []) * PAGE_BYTES);
    } finally {
      closeSync(fd);
    }
  }
  const names = new Set(files.map((f) => f.name));
  const layout = frameLayouts(dropped);
  return frames
    .filter((f) => names.has(f.name))
    .map((f) => {
      const placed = layout(f);
      const done = codecs.decompressToFile(f.src, f.srcOffset, f.srcLength, join(scratch, f.name), placed ? placed.dstPage * PAGE_BYTES : f.dstOffset, f.rawLength, f.what, placed?.keep);
      done.catch(() => undefined);
      return done;
    });
}

/**
 * Fewer zero pages than this in a pages file are not worth leaving out:
 * the plan decodes its pagemap's entries (0.05-0.09 s for issue 26's
 * PyTorch job, before the file's first frame is unpacked), and
 * CRIU copies pages into fresh memory at about 1.2 GB/s (2x H200), so
 * 64 MiB cost it about as much. Counted by file: each process's CRIU copies
 * its own pages, the processes at once, and each file's plan runs on a
 * worker of its own. Since the shim keeps the driver's zero pages out of
 * the dump, these images hold little of them.
 */
const PLAN_MIN_ZERO_BYTES = 64 << 20;

/** The pages files whose zero pages a restore may leave out (planZeroDrop decides), with their runs: those with fromBytes of them or more. */
function planned(index: PackedIndex, fromBytes: number): Map<string, PageRuns> {
  return new Map([...zeroRunsOf(index)].filter(([, runs]) => runsPages(runs) * PAGE_BYTES >= fromBytes));
}

function runsPages(runs: PageRuns): number {
  let n = 0;
  for (let i = 1; i < runs.length; i += 2) n += runs[i]!;
  return n;
}
