/**
 * Puts an image's pool data back into a process: staging memory from the
 * shim, frames decompressed into it by the codec workers, then DMA into the
 * pool at the frames' addresses. Used by rollback (restore --into) and by
 * resume. An incremental image brings its parents: each byte comes from
 * the newest image of the chain that holds it (image/chain.ts), checked
 * before anything is touched.
 *
 * prepare() verifies every frame before the caller touches the process:
 * when staging holds all frames, verifying is decompressing into place and
 * nothing is left for the pause but DMA; otherwise each frame is checked
 * first and decompressed again, batch by batch, during copyIn().
 */
import { CodecPool } from './codec-pool.js';
import { openChain, type ChainSource } from './image/chain.js';
import { frameLabel, type ImageReader } from './image/index.js';
import { Limiter } from './limiter.js';
import { Progress } from './progress.js';
import { closeStaging, type ShimSession, type StagingMemory } from './session.js';
import { batches, MAX_RANGES_PER_COPY, packAll, packedBytes, stagingBytes } from './staging-plan.js';
import { verifyFrames } from './verify-frames.js';
import type { CopyRange } from '../native/index.js';

export interface LoaderOptions {
  stagingLimit?: bigint;
  workers?: number;
  progress?: boolean;
}

type Source = ChainSource & { length: number };
type PlacedSource = { item: Source; offset: number };

export class PoolLoader {
  private constructor(
    /** The image and its parents, newest first (the caller owns the first). */
    private readonly chain: ImageReader[],
    private readonly staging: StagingMemory,
    private readonly codecs: CodecPool,
    private readonly groups: PlacedSource[][],
    /** True when every frame is already decompressed in staging. */
    readonly fits: boolean,
    private readonly progress: Progress,
  ) {}

  /** Opens reader's parents, maps staging in the process behind session and verifies the data. */
  static async prepare(session: ShimSession, reader: ImageReader, opts: LoaderOptions): Promise<PoolLoader> {
    const { parents, sources: plan } = await openChain(reader);
    const chain = [reader, ...parents];
    let staging: StagingMemory | undefined;
    let codecs: CodecPool | undefined;
    try {
      const sources: Source[] = plan.map((s) => ({ ...s, length: s.frame.length }));
      const rawBytes = sources.reduce((sum, s) => sum + BigInt(s.length), 0n);
      staging = await session.mapStaging(stagingBytes(rawBytes, sources.length, opts.stagingLimit));
      codecs = new CodecPool(opts.workers);
      const progress = new Progress(opts.progress);
      await codecs.mapStaging(staging);
      const fits = packedBytes(sources) <= staging.size;
      const loader = new PoolLoader(chain, staging, codecs, fits ? packAll(sources) : batches(sources, staging.size), fits, progress);
      if (fits) await loader.decompress(loader.groups.flat());
      else await verifyFrames(sources.map((s) => ({ reader: chain[s.image]!, index: s.frameIndex })), codecs, progress, 'restore');
      return loader;
    } catch (e) {
      await codecs?.close();
      if (staging) closeStaging(staging);
      await Promise.all(parents.map((p) => p.close()));
      throw e;
    }
  }

  /** DMA of every frame into the pool; the caller holds the process paused.
   * Returns the seconds spent in copies. */
  async copyIn(session: ShimSession): Promise<number> {
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

  async close(): Promise<void> {
    this.progress.done();
    await this.codecs.close();
    closeStaging(this.staging);
    await Promise.all(this.chain.slice(1).map((p) => p.close()));
  }

  private async decompress(group: PlacedSource[]): Promise<void> {
    // Bounds the compressed bytes read ahead of the workers.
    const limiter = new Limiter(2 * this.codecs.size);
    await Promise.all(
      group.map(({ item, offset }) =>
        limiter.run(async () => {
          const r = this.chain[item.image]!;
          const compressed = await r.readFrame(item.frameIndex);
          await this.codecs.decompressInto(compressed, offset, item.length, `${r.path}: ${frameLabel(item.frame, item.frameIndex)}`);
          this.progress.update(`restore: decompressed frame ${item.frameIndex + 1} of ${r.frameCount}${item.image ? ` (parent ${item.image})` : ''}`);
        }),
      ),
    );
  }
}
