/**
 * `gpuckpt peek PID ADDRESS LENGTH` reads a running process's device memory
 * without pausing it, and `gpuckpt poke PID ADDRESS VALUE...` writes it with
 * the process paused: through a CPU mapping of the pool's chunks (the
 * shim exports them, CHUNK_EXPORT; native/src/bar_map.h maps them: the
 * GPU's BAR through Vulkan on the GPU hosts), never through the
 * application's CUDA context or streams. Where no route maps them, one
 * line says what each route answered.
 */
import { GpuckptError } from '../base/errors.js';
import { decodeElements, elementSize, type ElementFormat } from '../base/element-format.js';
import { formatBytes, round } from '../base/units.js';
import { ShimSession } from '../adapters/session.js';
import { DEFAULT_LEASE_MS, native } from '../../native/index.js';

/** The most one peek reads: 1 GiB (0.6 GB/s through a BAR). */
export const PEEK_MAX = 1 << 30;

export interface PeekResult {
  pid: number;
  addr: bigint;
  length: number;
  device: number;
  route: string;
  format: ElementFormat;
  values: (number | string)[];
  /** The read itself, the mapping excluded. */
  readSeconds: number;
  seconds: number;
}

export interface PokeSummary {
  pid: number;
  addr: bigint;
  length: number;
  device: number;
  route: string;
  pauseSeconds: number;
  seconds: number;
}

/** The chunks under the range mapped into this process; fn uses the mapping, offset being the range's start in it. */
async function withMapping<T>(session: ShimSession, addr: bigint, length: number, fn: (id: number, offset: number, device: number, route: string) => T): Promise<T> {
  const { first, device, fds } = await session.chunkExport(addr, length);
  let mapped: ReturnType<ReturnType<typeof native>['barMap']>;
  try {
    const uuid = (await session.devices())[device]?.uuid ?? '';
    const routes = process.env.GPUCKPT_BAR_ROUTES?.trim().split(',');
    mapped = native().barMap(fds, Number(session.hello.chunkSize), uuid, routes);
  } finally {
    for (const fd of fds) native().closeFd(fd); // the mapping holds the memory
  }
  if ('tried' in mapped) throw new GpuckptError('NO_BAR_ROUTE', `no route maps GPU memory into the CPU here: ${mapped.tried.join('; ')}`);
  try {
    return fn(mapped.id, Number(addr - first), device, mapped.route);
  } finally {
    native().barUnmap(mapped.id);
  }
}

function checkRange(length: number, format: ElementFormat): void {
  if (!Number.isInteger(length) || length < 1 || length > PEEK_MAX) throw new GpuckptError('BAD_ARGUMENT', `a length of ${length} bytes: from 1 byte to ${formatBytes(PEEK_MAX)}`);
  if (length % elementSize(format)) throw new GpuckptError('BAD_ARGUMENT', `${length} bytes are not whole ${format} values (${elementSize(format)} bytes each)`);
}

export async function peekMemory(pid: number, addr: bigint, length: number, format: ElementFormat = 'hex'): Promise<PeekResult> {
  const t0 = performance.now();
  checkRange(length, format);
  const session = await ShimSession.open(pid);
  try {
    return await withMapping(session, addr, length, (id, offset, device, route) => {
      const r0 = performance.now();
      const bytes = native().barRead(id, offset, length);
      const readSeconds = (performance.now() - r0) / 1000;
      return { pid, addr, length, device, route, format, values: decodeElements(bytes, format), readSeconds: round(readSeconds, 6), seconds: round((performance.now() - t0) / 1000) };
    });
  } finally {
    session.close();
  }
}

/** Writes data at addr with the process paused: mapped, written and fenced inside the pause. */
export async function pokeMemory(pid: number, addr: bigint, data: Buffer, opts: { leaseMs?: number } = {}): Promise<PokeSummary> {
  const t0 = performance.now();
  checkRange(data.length, 'hex');
  const session = await ShimSession.open(pid);
  try {
    const p0 = performance.now();
    await session.quiesce(opts.leaseMs ?? DEFAULT_LEASE_MS);
    // Mapped inside the pause: the chunks written are those the allocation has now.
    const { device, route } = await withMapping(session, addr, data.length, (id, offset, device, route) => {
      native().barWrite(id, offset, data);
      return { device, route };
    }).finally(() => session.resume());
    return { pid, addr, length: data.length, device, route, pauseSeconds: round((performance.now() - p0) / 1000, 4), seconds: round((performance.now() - t0) / 1000) };
  } finally {
    session.close();
  }
}
