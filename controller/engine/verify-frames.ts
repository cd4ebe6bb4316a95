/**
 * Decompresses frames of images in the codec workers and checks each
 * (zstd content checksum, declared and actual length). Throws
 * IMAGE_DATA_CORRUPT naming a damaged frame; compressed bytes read ahead of
 * the workers are bounded.
 */
import type { CodecPool } from './codec-pool.js';
import { frameLabel, type ImageReader } from '../image/index.js';
import { Limiter } from '../base/limiter.js';
import type { Progress } from '../base/progress.js';

/** Every frame of one image. */
export function allFrames(reader: ImageReader): { reader: ImageReader; index: number }[] {
  return reader.manifest.data.frames.map((_, index) => ({ reader, index }));
}

export async function verifyFrames(frames: { reader: ImageReader; index: number }[], codecs: CodecPool, progress: Progress, label: string): Promise<void> {
  const limiter = new Limiter(2 * codecs.size);
  let done = 0;
  await Promise.all(
    frames.map(({ reader, index }) =>
      limiter.run(async () => {
        const f = reader.manifest.data.frames[index]!;
        await codecs.verify(await reader.readFrame(index), f.length, `${reader.path}: ${frameLabel(f, index)}`);
        progress.update(`${label}: verified frame ${++done} of ${frames.length}`);
      }),
    ),
  );
}
