/** The progress line of a step that moves bytes: done of total, rate, time left. */
import { describe, expect, it } from 'vitest';
import { transferLine } from '../controller/base/progress.js';

describe('progress', () => {
  it('says done of total, the rate and the time left', () => {
    const GiB = 2 ** 30;
    expect(transferLine('suspend: copied to host memory', 4 * GiB, 16 * GiB, 0, 2000)).toBe('suspend: copied to host memory: 4.00 GiB of 16.0 GiB (25 %), 2.00 GiB/s, 6.0 s left');
    expect(transferLine('checkpoint: compressed and written', GiB, 100 * GiB, 0, 10_000)).toBe('checkpoint: compressed and written: 1.00 GiB of 100.0 GiB (1 %), 102.4 MiB/s, 16 min 30 s left');
    expect(transferLine('resume', 16 * GiB, 16 * GiB, 0, 1000)).toMatch(/\(100 %\), .*, 0\.0 s left$/);
  });
});
