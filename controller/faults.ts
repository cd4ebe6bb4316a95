/**
 * Test-only fault injection. GPUCKPT_TEST_FAULT=step[,step...] makes each
 * named step fail as if the system had failed it, so tests can prove that
 * every failure leaves the application running or the image valid. The
 * shim's own steps are failed through the fake driver (FAKE_CUDA_FAIL) or
 * a real one; these are the controller's.
 */
import { GpuckptError } from './errors.js';

/**
 * checkpoint: compress, image-write; restore: image-read; reopen: the
 * controller fails after its last copy into the pool, before it lets the
 * application go (rollback and resume).
 */
export type FaultStep = 'compress' | 'image-write' | 'image-read' | 'reopen';

export function faultPoint(step: FaultStep): void {
  const spec = process.env.GPUCKPT_TEST_FAULT;
  if (spec && spec.split(',').includes(step)) throw new GpuckptError('INJECTED_FAULT', `injected fault at ${step} (GPUCKPT_TEST_FAULT)`);
}
