/**
 * The one error class of gpuckpt. Every failure a user can cause or meet is a
 * GpuckptError with a stable string code: the CLI prints `gpuckpt: <message>`
 * on one line and exits non-zero; anything else is a bug and keeps its stack.
 */
export type ErrorCode =
  // processes and sessions
  | 'PID_NOT_RUNNING'
  | 'NOT_UNDER_GPUCKPT'
  | 'PEER_REFUSED'
  | 'PROTOCOL_VERSION'
  | 'PROTOCOL_ERROR'
  | 'SHIM_ERROR'
  | 'SESSION_CLOSED'
  | 'OUT_OF_FDS'
  // images
  | 'IMAGE_MISSING'
  | 'IMAGE_CHAIN_BROKEN'
  | 'NO_DIGEST_KERNEL'
  | 'IMAGE_NOT_AN_IMAGE'
  | 'IMAGE_VERSION'
  | 'IMAGE_TRUNCATED'
  | 'IMAGE_CORRUPT'
  | 'IMAGE_DATA_CORRUPT'
  | 'IMAGE_EXISTS'
  | 'IMAGE_WRITE_FAILED'
  | 'IMAGE_READ_FAILED'
  | 'LAYOUT_MISMATCH'
  | 'HALF_RESTORED'
  // suspend, resume, migrate
  | 'NO_DRIVER_CHECKPOINT'
  | 'DRIVER_CHECKPOINT'
  | 'NOT_SUSPENDED'
  | 'ALREADY_SUSPENDED'
  | 'TARGET_NO_MEMORY'
  | 'GPU_OUT_OF_MEMORY'
  | 'NO_SUCH_GPU'
  // checkpoint --live
  | 'HOST_MEMORY'
  // whole-process images
  | 'NO_CRIU'
  | 'CRIU_FAILED'
  | 'CRIU_CANNOT'
  | 'NEEDS_TERMINAL'
  | 'FILE_CHANGED'
  | 'PID_IN_USE'
  | 'OTHER_CHIP'
  // distributed jobs
  | 'JOB_REFUSED'
  | 'CUT_TIMEOUT'
  | 'NCCL_FAILED'
  // peek and poke
  | 'NO_BAR_ROUTE'
  // environment and usage
  | 'NO_GPU'
  | 'NO_NVCC'
  | 'NO_SHIM'
  | 'BAD_ARGUMENT'
  | 'INJECTED_FAULT'
  | 'INTERRUPTED'
  | 'INTERNAL';

export class GpuckptError extends Error {
  readonly code: ErrorCode;
  /** The exit status, where the code's own (exitStatusOf) would mislead: a refusal's cause met after something was touched. */
  readonly exitStatus?: number;

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown; exitStatus?: number }) {
    super(message, options);
    this.name = 'GpuckptError';
    this.code = code;
    if (options?.exitStatus !== undefined) this.exitStatus = options.exitStatus;
  }
}

export function isGpuckptError(e: unknown, code?: ErrorCode): e is GpuckptError {
  return e instanceof GpuckptError && (code === undefined || e.code === code);
}

/**
 * Every result's value, or the first failure thrown again, its code kept
 * (INTERNAL for an error not ours), its message what(its index, message).
 */
export function valuesOrFirstFailure<T>(results: PromiseSettledResult<T>[], what: (index: number, message: string) => string): T[] {
  const failed = results.findIndex((r) => r.status === 'rejected');
  if (failed < 0) return results.map((r) => (r as PromiseFulfilledResult<T>).value);
  const e = (results[failed] as PromiseRejectedResult).reason as Error;
  throw new GpuckptError(isGpuckptError(e) ? e.code : 'INTERNAL', what(failed, e.message));
}

/**
 * The exit status a failure gives, by what the user should do:
 * 2, the command or its setting is wrong (fix it and run again);
 * 3, refused before anything was touched: everything is as it was;
 * 1, a failure partway: the message says what state things were left in.
 */
export const EXIT_FAILURE = 1;
export const EXIT_USAGE = 2;
export const EXIT_REFUSED = 3;

const USAGE: ErrorCode[] = ['BAD_ARGUMENT', 'NO_SUCH_GPU', 'PID_NOT_RUNNING', 'NOT_UNDER_GPUCKPT', 'IMAGE_MISSING', 'IMAGE_EXISTS', 'IMAGE_NOT_AN_IMAGE', 'NO_CRIU', 'NO_SHIM', 'NO_NVCC', 'NO_GPU', 'PEER_REFUSED', 'PROTOCOL_VERSION'];
const REFUSED: ErrorCode[] = [
  'CRIU_CANNOT',
  'JOB_REFUSED',
  'CUT_TIMEOUT',
  'OTHER_CHIP',
  'FILE_CHANGED',
  'NEEDS_TERMINAL',
  'PID_IN_USE',
  'TARGET_NO_MEMORY',
  'LAYOUT_MISMATCH',
  'HOST_MEMORY',
  'ALREADY_SUSPENDED',
  'NOT_SUSPENDED',
  'HALF_RESTORED',
  'IMAGE_CHAIN_BROKEN',
  'IMAGE_VERSION',
  'IMAGE_TRUNCATED',
  'IMAGE_CORRUPT',
  'IMAGE_DATA_CORRUPT',
  'NO_DRIVER_CHECKPOINT',
  'NO_DIGEST_KERNEL',
  'NO_BAR_ROUTE',
];

export function exitStatusOf(e: GpuckptError): number {
  if (e.exitStatus !== undefined) return e.exitStatus;
  return USAGE.includes(e.code) ? EXIT_USAGE : REFUSED.includes(e.code) ? EXIT_REFUSED : EXIT_FAILURE;
}
