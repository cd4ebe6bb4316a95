/** The one error class's helpers (controller/base/errors.ts) that other modules lean on. */
import { describe, expect, it } from 'vitest';
import { GpuckptError, valuesOrFirstFailure } from '../controller/base/errors.js';

describe('valuesOrFirstFailure', () => {
  it('gives every value in order when nothing failed', async () => {
    expect(valuesOrFirstFailure(await Promise.allSettled([Promise.resolve(1), Promise.resolve(2)]), () => 'unused')).toEqual([1, 2]);
  });

  it('throws the first failure again, its code kept, its message as what() says, with its index', async () => {
    const results = await Promise.allSettled([
      Promise.resolve(1),
      Promise.reject(new GpuckptError('NOT_SUSPENDED', 'first')),
      Promise.reject(new GpuckptError('INTERNAL', 'second')),
    ]);
    expect(() => valuesOrFirstFailure(results, (i, m) => `member ${i}: ${m}`)).toThrow(expect.objectContaining({ code: 'NOT_SUSPENDED', message: 'member 1: first' }));
  });

  it('makes an error not ours INTERNAL', async () => {
    const results = await Promise.allSettled([Promise.reject(new Error('boom'))]);
    expect(() => valuesOrFirstFailure(results, (_, m) => m)).toThrow(expect.objectContaining({ code: 'INTERNAL', message: 'boom' }));
  });
});
