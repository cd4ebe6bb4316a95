/**
 * The driver's process checkpoint API on another process, as steps that
 * either succeed or throw a GpuckptError naming the CUDA error.
 */
import { GpuckptError } from './errors.js';
import { DriverProcessState, native } from '../native/index.js';

const CU_ERRORS: Record<number, string> = {
  1: 'CUDA_ERROR_INVALID_VALUE',
  2: 'CUDA_ERROR_OUT_OF_MEMORY',
  3: 'CUDA_ERROR_NOT_INITIALIZED',
  100: 'CUDA_ERROR_NO_DEVICE',
  101: 'CUDA_ERROR_INVALID_DEVICE',
  401: 'CUDA_ERROR_ILLEGAL_STATE',
  801: 'CUDA_ERROR_NOT_SUPPORTED',
  999: 'CUDA_ERROR_UNKNOWN',
};

export type DriverStep = 'lock' | 'checkpoint' | 'restore' | 'unlock';
export interface GpuPair {
  from: string;
  to: string;
}

function check(result: number, what: string): void {
  if (result === -1) throw new GpuckptError('NO_DRIVER_CHECKPOINT', 'this NVIDIA driver has no process checkpoint API (driver 570 or newer is needed)');
  // Out of memory is the one refusal callers act on (a target GPU too full).
  const code = result === 2 ? 'GPU_OUT_OF_MEMORY' : 'DRIVER_CHECKPOINT';
  if (result !== 0) throw new GpuckptError(code, `${what} failed: ${CU_ERRORS[result] ?? `CUresult ${result}`}`);
}

export async function driverStep(step: DriverStep, pid: number, pairs?: GpuPair[]): Promise<void> {
  const r = await native().driverCheckpoint(step, pid, pairs);
  check(r.result, `driver ${step} of process ${pid}`);
}

export async function driverState(pid: number): Promise<number> {
  const r = await native().driverCheckpoint('state', pid);
  check(r.result, `driver state of process ${pid}`);
  return r.state ?? DriverProcessState.RUNNING;
}

/** Frees the GPU: the driver takes the process's remaining CUDA state to host memory. */
export async function driverFreeze(pid: number): Promise<void> {
  await driverStep('lock', pid);
  await driverStep('checkpoint', pid);
}

/** Brings the driver state back (onto other GPUs with pairs), whatever step a failure left it in. */
export async function driverThaw(pid: number, pairs?: GpuPair[]): Promise<void> {
  const state = await driverState(pid);
  if (state === DriverProcessState.CHECKPOINTED) await driverStep('restore', pid, pairs);
  if (state === DriverProcessState.CHECKPOINTED || state === DriverProcessState.LOCKED) await driverStep('unlock', pid);
}
