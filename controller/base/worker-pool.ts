/**
 * Worker threads of one script that take tasks by id: a task goes to the
 * least busy worker, and its reply (the task's id with it) settles it. A
 * reply with `error` rejects it with the GpuckptError it names; one with
 * `cancelled` leaves it unsettled (nobody awaits a task of a pool that is
 * closing). What the codec pool and an image stream's sender and receiver
 * run on.
 */
import { Worker } from 'node:worker_threads';
import { GpuckptError, type ErrorCode } from './errors.js';
import { log, logEnabled } from './log.js';

export interface WorkerReply {
  id: number;
  error?: { code: string; message: string };
  cancelled?: boolean;
}

interface Slot {
  worker: Worker;
  busy: number;
}

export class WorkerPool<Body extends object, Reply extends WorkerReply> {
  private readonly slots: Slot[] = [];
  private readonly pending = new Map<number, { slot: Slot; resolve: (r: Reply) => void; reject: (e: Error) => void }>();
  private nextId = 1;
  private failed: Error | undefined;
  private closing: Promise<void> | undefined;
  private idle: (() => void) | undefined;

  /** Its workers: as many as it started, still once they have ended (a pool that replaces it starts as many), less those taken. */
  private count: number;

  /**
   * what: the pool's name in its errors ("codec": "codec worker failed: ...").
   * script: the workers' script, size of them started; or workers taken
   * from another pool (take), size their number.
   */
  constructor(script: URL | Worker[], size: number, private readonly what: string, workerData?: unknown) {
    this.count = size;
    if (Array.isArray(script)) {
      for (const worker of script) this.adopt(worker);
      return;
    }
    const t0 = performance.now();
    let online = 0;
    const started = () => {
      if (++online === size) log('debug', what, `${size} workers started in ${((performance.now() - t0) / 1000).toFixed(3)} s`);
    };
    for (let i = 0; i < size; i++) {
      const worker = new Worker(script, { workerData });
      if (logEnabled('debug')) worker.once('online', started);
      this.adopt(worker);
    }
  }

  get size(): number {
    return this.count;
  }

  /**
   * n of its workers, started or still starting, as a pool of their own:
   * a pool started ahead of a command shared out among the pools it makes.
   * Only while none of its tasks is in flight.
   */
  take(n: number): WorkerPool<Body, Reply> {
    const why = this.failed ? 'one failed' : this.closing ? 'closing' : this.pending.size ? `${this.pending.size} tasks in flight` : n < 1 || n > this.slots.length ? 'not so many' : undefined;
    if (why) throw new GpuckptError('INTERNAL', `${n} of ${this.slots.length} ${this.what} workers cannot be taken: ${why}`);
    const moved = this.slots.splice(this.slots.length - n, n).map((s) => s.worker);
    for (const worker of moved) {
      worker.removeAllListeners('message');
      worker.removeAllListeners('error');
    }
    this.count -= n;
    return new WorkerPool(moved, n, this.what);
  }

  /** Idle workers that keep no process alive (unref), or that do again (ref). */
  hold(keepAlive: boolean): void {
    for (const s of this.slots) {
      if (keepAlive) s.worker.ref();
      else s.worker.unref();
    }
  }

  /** Tasks sent and not yet answered. */
  get inFlight(): number {
    return this.pending.size;
  }

  /** The task for the least busy worker; transfer: buffers moved to it, not copied. */
  run(body: Body, transfer: ArrayBuffer[] = []): Promise<Reply> {
    let best = this.slots[0];
    for (const s of this.slots) if (s.busy < best!.busy) best = s;
    return this.send(best, body, transfer);
  }

  /** The task once for every worker. */
  each(body: Body): Promise<Reply[]> {
    return Promise.all(this.slots.map((s) => this.send(s, body, [])));
  }

  /**
   * Ends the workers once no task is in flight: a worker terminated in the
   * middle of a native call aborted the whole controller (measured on a
   * 16-core host when a damaged frame failed a restore with other frames in
   * flight). A caller that wants queued tasks dropped has its workers
   * answer them `cancelled` first.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      while (this.pending.size > 0) await new Promise<void>((res) => (this.idle = res));
      await Promise.all(this.slots.map((s) => s.worker.terminate()));
      this.slots.length = 0;
    })();
    return this.closing;
  }

  private adopt(worker: Worker): void {
    worker.on('message', (r: Reply) => this.settle(r));
    worker.on('error', (e) => this.failAll(e));
    this.slots.push({ worker, busy: 0 });
  }

  private send(slot: Slot | undefined, body: Body, transfer: ArrayBuffer[]): Promise<Reply> {
    if (this.failed) return Promise.reject(this.failed);
    if (this.closing || !slot) return Promise.reject(new GpuckptError('INTERNAL', `${this.what} pool used after close`));
    const id = this.nextId++;
    slot.busy++;
    return new Promise<Reply>((resolve, reject) => {
      this.pending.set(id, { slot, resolve, reject });
      try {
        slot.worker.postMessage({ ...body, id }, transfer);
      } catch (e) {
        this.pending.delete(id);
        slot.busy--;
        reject(e as Error);
      }
    });
  }

  private settle(r: Reply): void {
    const p = this.pending.get(r.id);
    if (!p) return;
    this.pending.delete(r.id);
    p.slot.busy--;
    if (this.pending.size === 0) this.idle?.();
    if (r.cancelled) return;
    if (r.error) p.reject(new GpuckptError(r.error.code as ErrorCode, r.error.message));
    else p.resolve(r);
  }

  private failAll(e: Error): void {
    this.failed = new GpuckptError('INTERNAL', `${this.what} worker failed: ${e.message}`, { cause: e });
    for (const p of this.pending.values()) {
      p.slot.busy--;
      p.reject(this.failed);
    }
    this.pending.clear();
    this.idle?.();
  }
}

/** A transferable ArrayBuffer holding exactly these bytes: their own, or a copy. */
export function ownBuffer(bytes: Uint8Array): ArrayBuffer {
  if (bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength && bytes.buffer instanceof ArrayBuffer) return bytes.buffer;
  const copy = new Uint8Array(bytes.length);
  copy.set(bytes);
  return copy.buffer;
}
