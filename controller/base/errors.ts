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
  // environment and usage
  | 'NO_GPU'
  | 'NO_NVCC'
  | 'NO_SHIM'
  | 'BAD_ARGUMENT'
  | 'INJECTED_FAULT'
  | 'INTERNAL';

export class GpuckptError extends Error {
  readonly code: ErrorCode;

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'GpuckptError';
    this.code = code;
  }
}

export function isGpuckptError(e: unknown, code?: ErrorCode): e is GpuckptError {
  return e instanceof GpuckptError && (code === undefined || e.code === code);
}
