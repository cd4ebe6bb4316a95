/**
 * When a pool image's frames may start compressing, and on how many
 * workers until the application runs again: the one place that decides
 * it (engine/pool-image.ts follows it). Compression shares the host's
 * cores and memory bandwidth with the pause's own work, so where it
 * starts is a trade measured per kind of image on 2x H200.
 */

export interface CompressionStart {
  /**
   * copy: as each piece is copied; copied: once the copy is done, while
   * the release runs (a suspend frees the GPU); released: once the
   * application runs again (or the suspend is done).
   */
  at: 'copy' | 'copied' | 'released';
  /** Frames compressed or being written at once until then; absent: every worker's share. */
  workers?: number;
}

export interface ImageShape {
  kind: 'gpu-only' | 'process';
  /** Staging cannot hold every piece at once: its regions are reused. */
  ringMode: boolean;
  /** From a snapshot in GPU memory: the application runs already. */
  snapshot: boolean;
  /** An incremental image: staging holds only the changes. */
  parent: boolean;
  /** checkpoint --live: its rounds copied while the application ran. */
  live: boolean;
}

/** Two in five workers' worth. */
export function pauseCompressions(workers: number): number {
  return Math.max(1, Math.round((workers * 2) / 5));
}

export function compressionStart(shape: ImageShape, workers: number): CompressionStart {
  // A live image's last copy is short and the application waits on it alone.
  if (shape.live) return { at: 'released' };
  // A ring must free staging for the copy as fast as it can: never held
  // back. From a snapshot, no application waits.
  if (shape.ringMode || shape.snapshot) return { at: 'copy' };
  // An incremental image's copy is short and paced by staging, prepared as
  // it copies (16 GiB, 10 % changed: 1.7 GB in 0.21 s): compressing
  // meanwhile starts the writes that bound the image that much earlier.
  // With all 31 workers (32 cores) its pause took 0.20-0.30 s, with 12 of
  // them 0.15-0.17 s, and the image as long (0.62-0.67 s): the shim's
  // threads that prepare staging need the rest. Not a suspend's, whose
  // driver checkpoint compression would slow (below).
  if (shape.parent && shape.kind === 'gpu-only') return { at: 'copy', workers: pauseCompressions(workers) };
  // A whole-process checkpoint's pool image is what the command waits for
  // last: it starts while the suspend frees the GPU, on two in five
  // workers (PyTorch job: checkpoint 3.8-4.3 -> 2.8 s, the GPU free
  // 1.18 -> 1.24 s).
  if (shape.kind === 'process' && !shape.parent) return { at: 'copied', workers: pauseCompressions(workers) };
  // Otherwise the copy engines have host memory to themselves and the
  // pause is as short as the DMA; on every core during a suspend's driver
  // checkpoint, compression delayed the GPU being free (PyTorch job:
  // 1.58 -> 1.82 s, 16 GiB: 1.71 -> 2.00 s).
  return { at: 'released' };
}
