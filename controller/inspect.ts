/** What an image holds, and whether every frame's checksum verifies. */
import { CodecPool } from './codec-pool.js';
import { isGpuckptError } from './errors.js';
import { frameLabel, ImageReader, type Manifest } from './image/index.js';
import { Progress } from './progress.js';

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
      const frames = reader.manifest.data.frames;
      const jobs: Promise<void>[] = [];
      for (let i = 0; i < frames.length; i++) {
        if (jobs.length >= 4 * codecs.size) await Promise.all(jobs.splice(0));
        const f = frames[i]!;
        jobs.push(codecs.verify(await reader.readFrame(i), f.length, `${reader.path}: ${frameLabel(f, i)}`));
        progress.update(`inspect: verifying frame ${i + 1} of ${frames.length}`);
      }
      await Promise.all(jobs);
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
