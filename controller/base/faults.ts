/**
 * Test-only fault injection, so tests can prove that every failure leaves
 * the application running or the image valid, on the fake driver and on a
 * real one alike:
 * - GPUCKPT_TEST_FAULT=step[,step...] makes each named step of the
 *   controller's own fail as if the system had failed it;
 * - GPUCKPT_TEST_DRIVER_FAULT=fn:n[,fn:n...] makes the n-th call of the
 *   driver's process checkpoint function fn (cuCheckpointProcessLock, ...)
 *   return CUDA_ERROR_UNKNOWN. The shim reads the same variable in the
 *   application for the driver calls it makes for the controller
 *   (shim/testing/test_faults.h, in the test build of the shim only).
 */
import { GpuckptError } from './errors.js';

/**
 * checkpoint: compress, image-write; whole-process checkpoint: criu-sync
 * (making CRIU's files durable); restore: image-read; reopen: the
 * controller fails after its last copy into the pool, before it lets the
 * application go (rollback and resume); copy-back: checkpoint
 * --leave-running fails to copy the pool back in from its copy on the GPU.
 */
export type FaultStep = 'compress' | 'image-write' | 'criu-sync' | 'image-read' | 'reopen' | 'copy-back';

export function faultPoint(step: FaultStep): void {
  const spec = process.env.GPUCKPT_TEST_FAULT;
  if (spec && spec.split(',').includes(step)) throw new GpuckptError('INJECTED_FAULT', `injected fault at ${step} (GPUCKPT_TEST_FAULT)`);
}

const driverCalls = new Map<string, number>();

/** True when this call of driver function fn is the one GPUCKPT_TEST_DRIVER_FAULT fails. */
export function driverFaultDue(fn: string): boolean {
  const spec = process.env.GPUCKPT_TEST_DRIVER_FAULT;
  if (!spec) return false;
  const nth = (driverCalls.get(fn) ?? 0) + 1;
  driverCalls.set(fn, nth);
  return spec.split(',').some((entry) => entry === `${fn}:${nth}`);
}
