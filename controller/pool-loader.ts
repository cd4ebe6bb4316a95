/**
 * Puts an image's pool data back into a process: staging memory from the
 * shim, frames decompressed into it by the codec workers, then DMA into the
 * pool at the frames' addresses. Used by rollback (restore --into) and by
 * resume.
 *
 * prepare() verifies every frame before the caller touches the process:
 * when staging holds all frames, verifying is decompressing into place and
 * nothing is left for the pause but DMA; otherwise each frame is checked
 * first and decompressed again, batch by batch, during copyIn().
 */
import { CodecPool } from './codec-pool.js';
import { frameLabel, type FrameRecord, type ImageReader } from './image/index.js';
import { Limiter } from './limiter.js';
import { Progress } from './progress.js';
import type { ShimSession, StagingMemory } from './session.js';
import { batches, packAll, packedBytes, stagingBytes } from './staging-plan.js';
import { verifyFrames } from './verify-frames.js';
import { native } from '../native/index.js';

export interface LoaderOptions {
  stagingLimit?: bigint;
  workers?: number;
  progress?: boolean;
}

type PlacedFrame = { item: FrameRecord & { index: number }; offset: number };

export class PoolLoader {
  private constructor(
    private readonly reader: ImageReader,
    private readonly staging: StagingMemory,
    private readonly codecs: CodecPool,
    private readonly groups: PlacedFrame[][],
    /** True when every frame is already decompressed in staging. */
    readonly fits: boolean,
    private readonly progress: Progress,
  ) {}

  /** Maps staging in the process behind session and verifies the image. */
  static async prepare(session: ShimSession, reader: ImageReader, opts: LoaderOptions): Promise<PoolLoader> {
    const m = reader.manifest;
    const frames = m.data.frames.map((f, index) => ({ ...f, index }));
    const staging = await session.mapStaging(stagingBytes(m.data.rawBytes, frames.length, opts.stagingLimit));
    const codecs = new CodecPool(opts.workers);
    const progress = new Progress(opts.progress);
    try {
      await codecs.mapStaging(staging.fd, staging.size);
      const fits = packedBytes(frames) <= staging.size;
      const loader = new PoolLoader(reader, staging, codecs, fits ? packAll(frames) : batches(frames, staging.size), fits, progress);
      if (fits) await loader.decompress(loader.groups.flat());
      else await verifyFrames(reader, codecs, progress, 'restore');
      return loader;
    } catch (e) {
      await codecs.close();
      native().closeFd(staging.fd);
      throw e;
    }
  }

  /** DMA of every frame into the pool; the caller holds the process paused.
   * Returns the seconds spent in copies. */
  async copyIn(session: ShimSession): Promise<number> {
    let copySeconds = 0;
    for (const [i, group] of this.groups.entries()) {
      if (!this.fits) await this.decompress(group);
      const c0 = performance.now();
      const ranges = group.map(({ item, offset }) => ({ device: item.device, addr: item.addr, length: item.length, stagingOffset: offset }));
      await session.copyIn(ranges, i === this.groups.length - 1);
      copySeconds += (performance.now() - c0) / 1000;
    }
    this.progress.done();
    return copySeconds;
  }

  async close(): Promise<void> {
    this.progress.done();
    await this.codecs.close();
    native().closeFd(this.staging.fd);
  }

  private async decompress(group: PlacedFrame[]): Promise<void> {
    // Bounds the compressed bytes read ahead of the workers.
    const limiter = new Limiter(2 * this.codecs.size);
    const r = this.reader;
    await Promise.all(
      group.map(({ item: f, offset }) =>
        limiter.run(async () => {
          const compressed = await r.readFrame(f.index);
          await this.codecs.decompressInto(compressed, offset, f.length, `${r.path}: ${frameLabel(f, f.index)}`);
          this.progress.update(`restore: decompressed frame ${f.index + 1} of ${r.frameCount}`);
        }),
      ),
    );
  }
}
