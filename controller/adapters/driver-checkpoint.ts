/**
 * The driver's process checkpoint API on another process, as steps that
 * either succeed or throw a GpuckptError naming the CUDA error.
 */
import { GpuckptError } from '../base/errors.js';
import { driverFaultDue } from '../base/faults.js';
import type { PhaseClock } from '../base/phase-clock.js';
import { DriverProcessState, native } from '../../native/index.js';

const CU_ERRORS: Record<number, string> = {
  1: 'CUDA_ERROR_INVALID_VALUE',
  2: 'CUDA_ERROR_OUT_OF_MEMORY',
  3: 'CUDA_ERROR_NOT_INITIALIZED',
  4: 'CUDA_ERROR_DEINITIALIZED',
  100: 'CUDA_ERROR_NO_DEVICE',
  101: 'CUDA_ERROR_INVALID_DEVICE',
  201: 'CUDA_ERROR_INVALID_CONTEXT',
  304: 'CUDA_ERROR_OPERATING_SYSTEM',
  401: 'CUDA_ERROR_ILLEGAL_STATE',
  700: 'CUDA_ERROR_ILLEGAL_ADDRESS',
  801: 'CUDA_ERROR_NOT_SUPPORTED',
  999: 'CUDA_ERROR_UNKNOWN',
};

export type DriverStep = 'lock' | 'checkpoint' | 'restore' | 'unlock';
export interface GpuPair {
  from: string;
  to: string;
}

/** The GPU a restore with pairs puts what is on gpu now: its pair's, or gpu itself (UUIDs compared without case). */
export function landsOn(gpu: string, pairs: GpuPair[] | undefined): string {
  return pairs?.find((p) => p.from.toLowerCase() === gpu.toLowerCase())?.to ?? gpu;
}

/** what failed, naming the driver's call and its CUresult. */
function check(result: number, step: DriverStep | 'state', what: string): void {
  if (result === -1) throw new GpuckptError('NO_DRIVER_CHECKPOINT', 'this NVIDIA driver has no process checkpoint API (driver 570 or newer is needed)');
  // Out of memory is the one refusal callers act on (a target GPU too full).
  const code = result === 2 ? 'GPU_OUT_OF_MEMORY' : 'DRIVER_CHECKPOINT';
  if (result !== 0) throw new GpuckptError(code, `${what} failed: ${DRIVER_FUNCTION[step]} returned ${CU_ERRORS[result] ?? 'CUresult'} (${result})`);
}

const DRIVER_FUNCTION: Record<DriverStep | 'state', string> = {
  state: 'cuCheckpointProcessGetState',
  lock: 'cuCheckpointProcessLock',
  checkpoint: 'cuCheckpointProcessCheckpoint',
  restore: 'cuCheckpointProcessRestore',
  unlock: 'cuCheckpointProcessUnlock',
};

const CUDA_ERROR_UNKNOWN = 999;

/** One call of the driver's API (or, in a fault test, its failure). */
async function callDriver(step: DriverStep | 'state', pid: number, pairs?: GpuPair[]): Promise<{ result: number; state?: number }> {
  if (driverFaultDue(DRIVER_FUNCTION[step])) return { result: CUDA_ERROR_UNKNOWN };
  return native().driverCheckpoint(step, pid, pairs);
}

export async function driverStep(step: DriverStep, pid: number, pairs?: GpuPair[]): Promise<void> {
  const r = await callDriver(step, pid, pairs);
  check(r.result, step, `driver ${step} of process ${pid}`);
}

export async function driverState(pid: number): Promise<number> {
  const r = await callDriver('state', pid);
  check(r.result, 'state', `driver state of process ${pid}`);
  return r.state ?? DriverProcessState.RUNNING;
}

/** Frees the GPU: the driver takes the process's remaining CUDA state to host memory. */
export async function driverFreeze(pid: number, clock?: PhaseClock): Promise<void> {
  await driverStep('lock', pid);
  clock?.mark('driverLock');
  await driverStep('checkpoint', pid);
  clock?.mark('driverCheckpoint');
}

/**
 * Brings the driver state back (onto other GPUs with pairs), whatever step
 * a failure left it in. A suspended process is checkpointed but for such
 * failures, and asking the driver for the state of a checkpointed process
 * took 0.33 s on the H200 hosts (as long as the restore itself), so the
 * restore is tried at once and the state asked only when it is refused.
 */
export async function driverThaw(pid: number, pairs?: GpuPair[], clock?: PhaseClock): Promise<void> {
  const r = await callDriver('restore', pid, pairs);
  clock?.mark('driverRestore');
  if (r.result !== 0) {
    const state = await driverState(pid);
    if (state === DriverProcessState.CHECKPOINTED) check(r.result, 'restore', `driver restore of process ${pid}`);
    if (state !== DriverProcessState.LOCKED) return; // running already
  }
  await driverStep('unlock', pid);
  clock?.mark('driverUnlock');
}
