/** What an image holds, and whether every frame's checksum verifies. */
import { CodecPool } from '../engine/codec-pool.js';
import { isGpuckptError } from '../base/errors.js';
import { openChain } from '../image/chain.js';
import { ImageReader, type Manifest } from '../image/index.js';
import { Progress } from '../base/progress.js';
import { allFrames, verifyFrames } from '../engine/verify-frames.js';
import { describePacked, verifyCriuPages, type PagesSummary } from '../engine/criu-pages.js';
import { CRIU_DIR } from '../engine/restore-plan.js';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

export interface InspectReport {
  image: string;
  manifest: Manifest;
  verified: boolean;
  /** Why verification failed (the first damaged frame, a broken chain), when it did. */
  problem?: string;
  /** The parents an incremental image restores through, nearest first. */
  chain: { image: string; createdAt: string; rawBytes: bigint; storedBytes: bigint }[];
  /** A whole-process image's CRIU pages, where compressed. */
  criuPages?: Omit<PagesSummary, 'seconds'>;
}

export async function inspectImage(path: string, opts: { verify?: boolean; workers?: number; progress?: boolean } = {}): Promise<InspectReport> {
  const reader = await ImageReader.open(path);
  const parents: ImageReader[] = [];
  try {
    const report: InspectReport = { image: reader.path, manifest: reader.manifest, verified: false, chain: [] };
    try {
      parents.push(...(await openChain(reader)).parents);
    } catch (e) {
      if (!isGpuckptError(e, 'IMAGE_CHAIN_BROKEN')) throw e;
      report.problem = e.message;
    }
    const criuDir = join(reader.path, CRIU_DIR);
    const hasCriu = existsSync(criuDir);
    if (hasCriu) {
      try {
        report.criuPages = describePacked(criuDir);
      } catch (e) {
        if (!isGpuckptError(e, 'IMAGE_DATA_CORRUPT') && !isGpuckptError(e, 'IMAGE_TRUNCATED')) throw e;
        report.problem ??= e.message;
      }
    }
    report.chain = parents.map((p) => ({ image: p.path, createdAt: p.manifest.createdAt, rawBytes: p.manifest.data.rawBytes, storedBytes: p.manifest.data.storedBytes }));
    if (opts.verify === false || report.problem) return report;
    const codecs = new CodecPool(opts.workers);
    const progress = new Progress(opts.progress);
    try {
      await verifyFrames([reader, ...parents].flatMap(allFrames), codecs, progress, 'inspect');
      if (hasCriu) await verifyCriuPages(criuDir, codecs);
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
    await Promise.all([reader, ...parents].map((r) => r.close()));
  }
}
