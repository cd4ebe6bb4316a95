/**
 * When a pool image's frames start compressing (controller/engine/compression-start.ts):
 * the one table every kind of image follows.
 */
import { describe, expect, it } from 'vitest';
import { compressionStart, pauseCompressions, type ImageShape } from '../controller/engine/compression-start.js';

const plain: ImageShape = { kind: 'gpu-only', ringMode: false, snapshot: false, parent: false, live: false };
const at = (shape: Partial<ImageShape>) => compressionStart({ ...plain, ...shape }, 31);

describe('compression start', () => {
  it('two in five workers during a pause, never none', () => {
    expect(pauseCompressions(31)).toBe(12);
    expect(pauseCompressions(10)).toBe(4);
    expect(pauseCompressions(1)).toBe(1);
  });

  it('a full --gpu-only image waits for the application to run: the copy has host memory to itself', () => {
    expect(at({})).toEqual({ at: 'released' });
  });

  it('a ring compresses as it copies, on every worker, to free staging; so does an image from a snapshot', () => {
    expect(at({ ringMode: true })).toEqual({ at: 'copy' });
    expect(at({ ringMode: true, kind: 'process' })).toEqual({ at: 'copy' });
    expect(at({ ringMode: true, parent: true })).toEqual({ at: 'copy' });
    expect(at({ snapshot: true })).toEqual({ at: 'copy' });
  });

  it('an incremental --gpu-only image compresses during its copy on two in five workers; a suspend\'s waits for the release', () => {
    expect(at({ parent: true })).toEqual({ at: 'copy', workers: 12 });
    expect(at({ parent: true, kind: 'process' })).toEqual({ at: 'released' });
  });

  it("a whole-process checkpoint's full image starts while the suspend frees the GPU, on two in five workers", () => {
    expect(at({ kind: 'process' })).toEqual({ at: 'copied', workers: 12 });
  });

  it('a live image waits for the application, whatever else holds', () => {
    expect(at({ live: true })).toEqual({ at: 'released' });
    expect(at({ live: true, parent: true })).toEqual({ at: 'released' });
    expect(at({ live: true, kind: 'process' })).toEqual({ at: 'released' });
  });
});
