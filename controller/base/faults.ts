/**
 * Fault points: the steps where tests make the controller fail as if the
 * system had failed it, to prove every failure leaves the application
 * running or the image valid. Production installs no injector, so each
 * point does nothing; the test build's injector
 * (test/helpers/fault-injector.mjs, loaded with node --import) reads
 * GPUCKPT_TEST_FAULT and GPUCKPT_TEST_DRIVER_FAULT.
 */
import { GpuckptError } from './errors.js';

/**
 * checkpoint: compress, image-write; whole-process checkpoint: criu-sync
 * (making CRIU's files durable); restore: image-read; gpu-checks: a
 * whole-process restore's GPU checks refuse, beside CRIU; reopen: the
 * controller fails after its last copy into the pool, before it lets the
 * application go (rollback and resume); copy-back: checkpoint
 * --leave-running fails to copy the pool back in from its copy on the GPU;
 * rebuild: a job's communicator is made again on its first rank only, as
 * if the controller died between ranks; criu-pages-unlink: a raw page file
 * of CRIU's cannot be removed once packed.
 */
export type FaultStep = 'compress' | 'image-write' | 'criu-sync' | 'image-read' | 'gpu-checks' | 'reopen' | 'copy-back' | 'rebuild' | 'criu-pages-unlink';

export interface FaultInjector {
  /** Why this step fails now (named in the error), or undefined. */
  failStep(step: FaultStep): string | undefined;
  /** True when this call of the driver's checkpoint function fn fails. */
  failDriverCall(fn: string): boolean;
}

let injector: FaultInjector | undefined;

export function installFaultInjector(i: FaultInjector): void {
  injector = i;
}

export function faultPoint(step: FaultStep): void {
  const why = injector?.failStep(step);
  if (why) throw new GpuckptError('INJECTED_FAULT', `injected fault at ${step} (${why})`);
}

/** True when the installed injector fails this call of driver function fn. */
export function driverFaultDue(fn: string): boolean {
  return injector?.failDriverCall(fn) ?? false;
}
