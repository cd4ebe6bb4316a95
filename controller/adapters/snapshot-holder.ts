/**
 * The snapshot holder (native/holder/snapshot_holder.c): a small process,
 * one per run directory, with no CUDA context, that keeps the exported
 * fds of GPU-held snapshots, so that their memory outlives the controller
 * that made them. It answers the HOLD_* messages on
 * <run dir>/snapshot-holder.sock; this module starts it when none answers
 * and speaks to it.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, openSync, closeSync } from 'node:fs';
import { join } from 'node:path';
import { GpuckptError, isGpuckptError } from '../base/errors.js';
import { firstLine } from './processes.js';
import { ownRunDir } from './run-dir.js';
import { HoldFlag, MAX_STAGING_FILES, MessageType, native, packageRoot, type HoldEntry, type HoldListReply, type HoldReply, type NativeError, type NativeSession } from '../../native/index.js';

/** How long a new holder may take to say it listens. */
const START_WAIT_MS = 5000;
const REQUEST_TIMEOUT_MS = 30_000;

export function holderSocket(runDir: string = ownRunDir()): string {
  return join(runDir, 'snapshot-holder.sock');
}

export function holderBinary(): string {
  return join(packageRoot(), 'build', 'gpuckpt-snapshot-holder');
}

/** One part of a snapshot to hand over: the fds of its memory on one GPU, in chunk order, and the bytes behind each. */
export interface PartToHold {
  uuid: string;
  fds: number[];
  sizes: number[];
}

export class SnapshotHolder {
  private constructor(
    private readonly conn: NativeSession,
    readonly socket: string,
  ) {}

  /** Connects to the holder of runDir; undefined when none answers. */
  static connect(runDir: string): SnapshotHolder | undefined {
    const socket = holderSocket(runDir);
    if (!existsSync(socket)) return undefined;
    try {
      return new SnapshotHolder(new (native().Session)(socket), socket);
    } catch (e) {
      const code = (e as NativeError).code;
      if (code === 'ENOENT' || code === 'ECONNREFUSED') return undefined;
      throw new GpuckptError('SESSION_CLOSED', `cannot reach the snapshot holder at ${socket}: ${(e as Error).message}`);
    }
  }

  /**
   * Connects to the holder of runDir, started first when none answers. A
   * first request makes sure it serves: one that was ending as we connected
   * resets the connection, and a new one is started.
   */
  static async connectOrStart(runDir: string): Promise<SnapshotHolder> {
    for (let attempt = 0; ; attempt++) {
      const holder = SnapshotHolder.connect(runDir) ?? (await launch(runDir, holderSocket(runDir)), SnapshotHolder.connect(runDir));
      if (!holder) throw new GpuckptError('INTERNAL', `the snapshot holder started but does not answer at ${holderSocket(runDir)}`);
      try {
        await holder.list();
        return holder;
      } catch (e) {
        holder.close();
        if (attempt === 1 || !isGpuckptError(e, 'SESSION_CLOSED')) throw e;
      }
    }
  }

  close(): void {
    this.conn.close();
  }

  private async request<T>(type: number, args: object, what: string, fds?: number[]): Promise<T & { fds?: number[] }> {
    try {
      return (await this.conn.request(type, args, REQUEST_TIMEOUT_MS, fds)) as T & { fds?: number[] };
    } catch (e) {
      const err = e as NativeError;
      if (err.code === 'EPROTONOSUPPORT')
        throw new GpuckptError('PROTOCOL_VERSION', `the snapshot holder at ${this.socket} speaks another protocol version than this gpuckpt (${native().protocolVersion}): release its snapshots with the gpuckpt that made them`);
      if (err.code === 'ENOENT') throw new GpuckptError('IMAGE_MISSING', `${what}: the snapshot holder holds no such snapshot (released, or its process ended)`);
      if (err.code === 'EMFILE') throw new GpuckptError('OUT_OF_FDS', `${what}: the snapshot holder has no room for more open files (its hard RLIMIT_NOFILE)`);
      throw new GpuckptError('SESSION_CLOSED', `${what}: the snapshot holder failed: ${err.message}`);
    }
  }

  /**
   * Hands a snapshot's parts over, at most MAX_STAGING_FILES fds a
   * request; the holder keeps its own copies of the fds (the caller
   * closes its). keep: never reclaimed (a pool's only copy). Returns the
   * snapshot's id.
   */
  async put(pid: number, startTime: bigint, parts: PartToHold[], keep = false): Promise<bigint> {
    let id = 0n;
    for (const [part, { uuid, fds, sizes }] of parts.entries())
      for (let first = 0; first < fds.length; first += MAX_STAGING_FILES) {
        const batch = fds.slice(first, first + MAX_STAGING_FILES);
        const bytes = sizes.slice(first, first + MAX_STAGING_FILES).reduce((s, n) => s + n, 0);
        const last = part === parts.length - 1 && first + MAX_STAGING_FILES >= fds.length;
        const rep = await this.request<HoldReply>(MessageType.HOLD_PUT, { id, startTime, bytes, first, pid, part, flags: (last ? HoldFlag.LAST : 0) | (keep ? HoldFlag.KEEP : 0), uuid }, 'hold the snapshot', batch);
        id = rep.id;
      }
    return id;
  }

  async list(): Promise<HoldListReply> {
    return this.request<HoldListReply>(MessageType.HOLD_LIST, {}, 'list the held snapshots');
  }

  /** Copies of the count fds of one part, in order (the caller's to close). */
  async take(id: bigint, part: number, count: number): Promise<number[]> {
    const fds: number[] = [];
    try {
      for (let first = 0; first < count; first += MAX_STAGING_FILES) {
        const batch = Math.min(MAX_STAGING_FILES, count - first);
        const rep = await this.request<HoldReply>(MessageType.HOLD_TAKE, { id, first, part, count: batch }, `take snapshot ${id}`);
        fds.push(...(rep.fds ?? []));
        if ((rep.fds?.length ?? 0) !== batch) throw new GpuckptError('PROTOCOL_ERROR', `the snapshot holder passed ${rep.fds?.length ?? 0} fds of ${batch}`);
      }
      return fds;
    } catch (e) {
      for (const fd of fds) native().closeFd(fd);
      throw e;
    }
  }

  /** Lets snapshots go: one by id, or (id 0) every one of pid (pid 0: all). */
  async drop(id: bigint, pid: number): Promise<HoldReply> {
    return this.request<HoldReply>(MessageType.HOLD_DROP, { id, pid }, id ? `release snapshot ${id}` : 'release snapshots');
  }
}

/** Starts a holder detached from this process; resolves once it listens (or another does). */
async function launch(runDir: string, socket: string): Promise<void> {
  const binary = holderBinary();
  if (!existsSync(binary)) throw new GpuckptError('NO_SHIM', `the snapshot holder is not built (${binary}): run npm run build`);
  const logs = join(runDir, 'logs');
  mkdirSync(logs, { recursive: true, mode: 0o700 });
  const log = openSync(join(logs, 'snapshot-holder.log'), 'a', 0o600);
  let said: string;
  try {
    const child = spawn(binary, [socket], { detached: true, stdio: ['ignore', 'pipe', log], cwd: '/' });
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<string>((resolve) => {
      timer = setTimeout(() => {
        child.kill('SIGKILL');
        resolve(`no answer in ${START_WAIT_MS / 1000} s`);
      }, START_WAIT_MS);
    });
    said = await Promise.race([firstLine(child), late]);
    clearTimeout(timer);
    child.stdout!.destroy();
    child.unref();
  } finally {
    closeSync(log);
  }
  if (said !== 'ready' && said !== 'running') throw new GpuckptError('INTERNAL', `the snapshot holder did not start: ${said.replace(/^failed: /, '')}`);
}

export type { HoldEntry };
