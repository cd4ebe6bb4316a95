/**
 * The environment variables gpuckpt and the shim it preloads read, checked
 * before a command does anything: a bad value is refused in one line
 * naming it, instead of being read as the default.
 */
import { GpuckptError } from './errors.js';

type Kind = 'size' | 'address' | 'seconds' | 'flag' | 'level' | 'shuffle' | 'routes' | 'verbosity' | 'keep';

/** Name, kind; the shim's (shim/interpose/config.h) and the controller's own. */
const SETTINGS: [string, Kind][] = [
  ['GPUCKPT_LOG', 'level'],
  ['GPUCKPT_POOL_BASE', 'address'],
  ['GPUCKPT_POOL_SIZE', 'size'],
  ['GPUCKPT_CHUNK_SIZE', 'size'],
  ['GPUCKPT_POOL_RETAIN', 'size'],
  ['GPUCKPT_STAGING_PIECE', 'size'],
  ['GPUCKPT_STAGING_FILE', 'size'],
  ['GPUCKPT_HOST_RETAIN', 'size'],
  ['GPUCKPT_NCCL_TIMEOUT', 'seconds'],
  ['GPUCKPT_CUT_TIMEOUT', 'seconds'],
  ['GPUCKPT_DISABLE', 'flag'],
  ['GPUCKPT_ALLOW_IO_URING', 'flag'],
  ['GPUCKPT_DRIVER_WARMUP', 'flag'],
  ['GPUCKPT_SHUFFLE', 'shuffle'],
  ['GPUCKPT_FRAMEWORK_HOOK', 'flag'],
  ['GPUCKPT_FRAMEWORK_WAIT', 'seconds'],
  ['GPUCKPT_BAR_ROUTES', 'routes'],
  ['GPUCKPT_CRIU_VERBOSITY', 'verbosity'],
  ['GPUCKPT_HUGE_SCRATCH', 'flag'],
  ['GPUCKPT_HUGE_STAGING', 'flag'],
  ['GPUCKPT_DRIVER_ZEROS', 'keep'],
  ['GPUCKPT_STACKS', 'keep'],
];

const VALID: Record<Kind, [RegExp, string]> = {
  size: [/^(0x[0-9a-f]+|[0-9]+)\s*([kmgt]?)(i?b)?$/i, 'a size (examples: 64G, 512M, 1048576)'],
  address: [/^(0x[0-9a-f]+|[0-9]+)$/i, 'an address (example: 0x600000000000)'],
  seconds: [/^([0-9]+(\.[0-9]+)?|\.[0-9]+)$/, 'a number of seconds'],
  flag: [/^[01]$/, '0 or 1'],
  level: [/^(error|warn|info|debug)$/, 'one of error, warn, info, debug'],
  shuffle: [/^(auto|off|2|4)$/, 'auto, off, 2 or 4 (byte planes of that element size in every frame)'],
  routes: [/^(mmap|vulkan)(,(mmap|vulkan))*$/, 'routes to try in order, of mmap and vulkan (example: vulkan,mmap)'],
  verbosity: [/^[0-4]$/, "a CRIU log level from 0 to 4 (CRIU's -v)"],
  keep: [/^keep$/, 'keep, or unset'],
};

export function checkEnvironment(env: NodeJS.ProcessEnv = process.env): void {
  for (const [name, kind] of SETTINGS) {
    const v = env[name];
    if (v === undefined || v === '') continue;
    const [pattern, what] = VALID[kind];
    if (!pattern.test(v.trim()) || (kind === 'seconds' && Number(v) <= 0))
      throw new GpuckptError('BAD_ARGUMENT', `${name}="${v}" must be ${what}${kind === 'seconds' ? ' above 0' : ''}`);
  }
}
