/**
 * Puts an image's pool data back into a process: staging memory made here,
 * frames decompressed into it by the codec workers, the staging handed to
 * the shim, then DMA into the pool at the frames' addresses. Used by
 * rollback (restore --into), resume, and whole-process restore, which
 * decompresses while CRIU brings the process back. An incremental image
 * brings its parents: each byte comes from the newest image of the chain
 * that holds it (image/chain.ts), checked before anything is touched. The
 * image's all-zero blocks are set to zero on the GPU first.
 *
 * open() verifies every frame without touching any process: when staging
 * holds all frames, verifying is decompressing into place and nothing is
 * left for the pause but DMA; otherwise each frame is checked first and
 * decompressed again, batch by batch, during copyIn().
 */
import { CodecPool } from './codec-pool.js';
import { isGpuckptError } from '../base/errors.js';
import { PhaseClock } from '../base/phase-clock.js';
import { openChain, type ChainSource, type OpenedChain } from '../image/chain.js';
import { frameLabel, type AllocationRecord, type ImageReader } from '../image/index.js';
import { Limiter } from '../base/limiter.js';
import { Progress } from '../base/progress.js';
import { closeStaging, releaseStaging, type ShimSession, type StagingMemory } from '../adapters/session.js';
import { newStaging } from './staging-files.js';
import { batches, MAX_RANGES_PER_COPY, packAll, packedBytes, stagingBytes } from './staging-plan.js';
import { verifyFrames } from './verify-frames.js';
import type { CopyRange } from '../../native/index.js';

export interface LoaderOptions {
  stagingLimit?: bigint;
  workers?: number;
  progress?: boolean;
  /** Codec workers started earlier, their start hidden behind other work; the loader takes them over and ends them. */
  codecs?: CodecPool;
}

type Source = ChainSource & { length: number };
type PlacedSource = { item: Source; offset: number };

export class PoolLoader {
  /** Settles once every frame is in staging (fits) or checked (otherwise); rejects naming a damaged frame. */
  private ready: Promise<void> = Promise.resolve();
  /** ready resolved, with every frame in staging. */
  private loaded = false;
  /** Seconds from open() until ready settled. */
  loadSeconds = 0;

  private constructor(
    /** The image and its parents, newest first (the caller owns the first). */
    private readonly chain: ImageReader[],
    private staging: StagingMemory,
    private codecs: CodecPool,
    private readonly groups: PlacedSource[][],
    /** True when every frame is decompressed into staging before the copies. */
    readonly fits: boolean,
    private readonly progress: Progress,
    private readonly zeroFills: AllocationRecord[],
    /** The debug trace of where loading's time goes. */
    private readonly clock: PhaseClock,
  ) {}

  /**
   * Opens reader's parents (or takes opened, openChain(reader) already
   * done by the caller: the loader then owns its parents, closed here on
   * failure), makes staging and starts loading it: no process is touched.
   * whenReady() or attach() says how that went.
   */
  static async open(reader: ImageReader, opts: LoaderOptions, opened?: OpenedChain): Promise<PoolLoader> {
    const clock = new PhaseClock('pool load');
    const { parents, sources: plan, zeroFills } = opened ?? (await openChain(reader));
    const chain = [reader, ...parents];
    let staging: StagingMemory | undefined;
    let codecs: CodecPool | undefined;
    try {
      const sources: Source[] = plan.map((s) => ({ ...s, length: s.frame.length }));
      const rawBytes = sources.reduce((sum, s) => sum + BigInt(s.length), 0n);
      clock.mark('chain');
      staging = newStaging(stagingBytes(rawBytes, sources.length, opts.stagingLimit));
      clock.mark('staging');
      codecs = opts.codecs ?? new CodecPool(opts.workers);
      await codecs.mapStaging(staging);
      clock.mark('workers');
      const fits = packedBytes(sources) <= staging.size;
      const groups = fits ? packAll(sources) : batches(sources, staging.size);
      const loader = new PoolLoader(chain, staging, codecs, groups, fits, new Progress(opts.progress), zeroFills, clock);
      loader.startLoading();
      return loader;
    } catch (e) {
      await codecs?.close();
      if (staging) closeStaging(staging);
      await Promise.all(parents.map((p) => p.close()));
      throw e;
    }
  }

  /** open() and attach() in one: what a caller with the process at hand does. */
  static async prepare(session: ShimSession, reader: ImageReader, opts: LoaderOptions): Promise<PoolLoader> {
    const loader = await PoolLoader.open(reader, opts);
    try {
      await loader.attach(session);
      return loader;
    } catch (e) {
      await loader.close();
      throw e;
    }
  }

  /** The image restored (the newest of its chain). */
  get reader(): ImageReader {
    return this.chain[0]!;
  }

  /** Waits until the data is loaded (or, when staging cannot hold it, checked). */
  whenReady(): Promise<void> {
    return this.ready;
  }

  /**
   * Hands the staging to the process behind session and waits for the
   * loading. Still loading, the shim pins the staging meanwhile and the
   * DMA runs straight from it; loaded already (whole-process restore),
   * pinning could overlap nothing, so copies go through the shim's bounce
   * ring. An application out of fds cannot take it: the shim's own
   * staging is loaded instead.
   */
  async attach(session: ShimSession): Promise<void> {
    try {
      await session.giveStaging(this.staging, this.loaded);
      this.clock.mark('given');
    } catch (e) {
      if (!isGpuckptError(e, 'OUT_OF_FDS')) throw e;
      await this.ready;
      const theirs = await session.mapStaging(this.staging.size, 'shared', false);
      closeStaging(this.staging);
      this.staging = theirs;
      if (this.fits) this.codecs = new CodecPool(this.codecs.size); // as many as those ended once loaded
      await this.codecs.mapStaging(theirs);
      // Checked frames are decompressed batch by batch during copyIn(); loaded ones go in again.
      if (this.fits) this.startLoading();
    }
    await this.ready;
    this.clock.mark('loaded');
  }

  private startLoading(): void {
    const t0 = performance.now();
    const sources = this.groups.flat();
    const loading = this.fits
      ? this.decompress(sources)
      : verifyFrames(sources.map(({ item }) => ({ reader: this.chain[item.image]!, index: item.frameIndex })), this.codecs, this.progress, 'restore');
    this.loaded = false;
    this.ready = loading
      .then(() => {
        this.loaded = this.fits;
        if (this.fits) this.endWorkers();
      })
      .finally(() => (this.loadSeconds = (performance.now() - t0) / 1000));
    // Observed by whenReady() or attach(); never an unhandled rejection meanwhile.
    this.ready.catch(() => undefined);
  }

  /** Zeros, then DMA of every frame into the pool; the caller holds the process paused.
   * Returns the seconds spent in copies. */
  async copyIn(session: ShimSession): Promise<number> {
    await session.fillZeros(this.zeroFills, this.groups.length === 0);
    let copySeconds = 0;
    for (const [i, group] of this.groups.entries()) {
      if (!this.fits) await this.decompress(group);
      const ranges: CopyRange[] = group.flatMap(({ item, offset }) =>
        item.parts.map((p) => ({ device: item.frame.device, addr: p.addr, length: p.length, stagingOffset: offset + Number(p.addr - item.frame.addr) })),
      );
      for (let k = 0; k < ranges.length; k += MAX_RANGES_PER_COPY) {
        const c0 = performance.now();
        const last = i === this.groups.length - 1 && k + MAX_RANGES_PER_COPY >= ranges.length;
        await session.copyIn(ranges.slice(k, k + MAX_RANGES_PER_COPY), last);
        copySeconds += (performance.now() - c0) / 1000;
      }
    }
    this.progress.done();
    return copySeconds;
  }

  /**
   * Every frame in staging: the workers and their mapping of it are needed
   * no more. Ended now, beside CRIU or the copies, rather than once the
   * application runs again: the unmap took 0.21-0.54 s a rank and the
   * workers' end 0.12-0.21 s, and the restore waited for both (2x H200).
   */
  private endWorkers(): void {
    this.codecs.close().catch(() => undefined); // its error, if any, comes again from close()
  }

  async close(): Promise<void> {
    this.progress.done();
    this.clock.mark('in use');
    // Loading still under way is cut short: the workers stop once out of zstd.
    // Their mapping goes first, so that no unmap is a memfd's last reference:
    // the kernel frees a memfd's pages at its last reference, on that thread
    // (0.83 s for the PyTorch job's staging), the fds closed on several
    // threads free them in a fraction (releaseStaging).
    await this.codecs.close();
    this.clock.mark('workers ended');
    await releaseStaging(this.staging);
    this.clock.mark('staging released');
    await Promise.all(this.chain.slice(1).map((p) => p.close()));
  }

  private async decompress(group: PlacedSource[]): Promise<void> {
    // Bounds the tasks queued ahead of the workers.
    const limiter = new Limiter(2 * this.codecs.size);
    await Promise.all(
      group.map(({ item, offset }) =>
        limiter.run(async () => {
          const r = this.chain[item.image]!;
          await this.codecs.decompressInto(r.frameSource(item.frameIndex), offset, item.length, `${r.path}: ${frameLabel(item.frame, item.frameIndex)}`, item.frame.planes);
          this.progress.update(`restore: decompressed frame ${item.frameIndex + 1} of ${r.frameCount}${item.image ? ` (parent ${item.image})` : ''}`);
        }),
      ),
    );
  }
}
