/** What an image holds, and whether every frame's checksum verifies. */
import { CodecPool } from './codec-pool.js';
import { isGpuckptError } from './errors.js';
import { ImageReader, type Manifest } from './image/index.js';
import { Progress } from './progress.js';
import { verifyFrames } from './verify-frames.js';

export interface InspectReport {
  image: string;
  manifest: Manifest;
  verified: boolean;
  /** Why verification failed (the first damaged frame), when it did. */
  problem?: string;
}

export async function inspectImage(path: string, opts: { verify?: boolean; workers?: number; progress?: boolean } = {}): Promise<InspectReport> {
  const reader = await ImageReader.open(path);
  try {
    const report: InspectReport = { image: reader.path, manifest: reader.manifest, verified: false };
    if (opts.verify === false) return report;
    const codecs = new CodecPool(opts.workers);
    const progress = new Progress(opts.progress);
    try {
      await verifyFrames(reader, codecs, progress, 'inspect');
      report.verified = true;
    } catch (e) {
      if (!isGpuckptError(e, 'IMAGE_DATA_CORRUPT') && !isGpuckptError(e, 'IMAGE_TRUNCATED')) throw e;
      report.problem = e.message;
    } finally {
      progress.done();
      await codecs.close();
    }
    return report;
  } finally {
    await reader.close();
  }
}
