/**
 * Decompresses every frame of an image in the codec workers and checks it
 * (zstd content checksum, declared and actual length). Throws
 * IMAGE_DATA_CORRUPT naming a damaged frame; compressed bytes read ahead of
 * the workers are bounded.
 */
import type { CodecPool } from './codec-pool.js';
import { frameLabel, type ImageReader } from './image/index.js';
import { Limiter } from './limiter.js';
import type { Progress } from './progress.js';

export async function verifyFrames(reader: ImageReader, codecs: CodecPool, progress: Progress, label: string): Promise<void> {
  const frames = reader.manifest.data.frames;
  const limiter = new Limiter(2 * codecs.size);
  let done = 0;
  await Promise.all(
    frames.map((f, i) =>
      limiter.run(async () => {
        await codecs.verify(await reader.readFrame(i), f.length, `${reader.path}: ${frameLabel(f, i)}`);
        progress.update(`${label}: verified frame ${++done} of ${frames.length}`);
      }),
    ),
  );
}
