/**
 * A pool of worker threads that compress and decompress frames in parallel,
 * so the event loop only schedules and writes. Each worker maps the staging
 * memfd once; tasks name offsets in it (or, for CRIU's files, a path).
 */
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import { GpuckptError, type ErrorCode } from '../base/errors.js';
import { faultPoint } from '../base/faults.js';
import type { Planes, PlanesMode } from '../image/byte-planes.js';

export type CodecTask =
  | { id: number; op: 'map'; fds: number[]; fileBytes: number; size: number }
  | { id: number; op: 'compress'; offset: number; length: number; level: number; planes: PlanesMode }
  | { id: number; op: 'decompress'; compressed: ArrayBuffer; offset: number; length: number; what: string; planes?: 2 | 4 }
  | { id: number; op: 'verify'; compressed: ArrayBuffer; length: number; what: string }
  | { id: number; op: 'digest'; offset: number; length: number; blockSize: number }
  | { id: number; op: 'compressFile'; path: string; offset: number; length: number; level: number }
  | { id: number; op: 'decompressToFile'; src: string; srcOffset: number; srcLength: number; dst: string; dstOffset: number; length: number; what: string };

export interface CodecReply {
  id: number;
  data?: ArrayBuffer;
  /** compress: the layout the frame was compressed in. */
  planes?: Planes;
  error?: { code: string; message: string };
  /** Not run: the pool was closing. */
  cancelled?: boolean;
}

type DistributiveOmit<T, K extends keyof any> = T extends unknown ? Omit<T, K> : never;
type TaskBody = DistributiveOmit<CodecTask, 'id'>;

interface Slot {
  worker: Worker;
  busy: number;
}

/** Default: every core but one, which stays for the event loop and I/O. */
export function defaultWorkerCount(): number {
  return Math.max(1, Math.min(32, availableParallelism() - 1));
}

export class CodecPool {
  private readonly slots: Slot[] = [];
  private readonly pending = new Map<number, { resolve: (r: CodecReply) => void; reject: (e: Error) => void }>();
  private nextId = 1;
  private failed: Error | undefined;
  /** Set by close(): workers answer the tasks still queued without running them. */
  private readonly cancelled = new Int32Array(new SharedArrayBuffer(4));
  private idle: (() => void) | undefined;
  private closing: Promise<void> | undefined;

  constructor(workers = defaultWorkerCount()) {
    const url = new URL('./codec-worker.js', import.meta.url);
    for (let i = 0; i < workers; i++) {
      const worker = new Worker(url, { workerData: { cancelled: this.cancelled } });
      worker.on('message', (r: CodecReply) => this.settle(r));
      worker.on('error', (e) => this.failAll(e));
      this.slots.push({ worker, busy: 0 });
    }
  }

  get size(): number {
    return this.slots.length;
  }

  /** Maps the staging memfds in every worker. */
  async mapStaging(staging: { fds: number[]; fileBytes: number; size: number }): Promise<void> {
    const { fds, fileBytes, size } = staging;
    await Promise.all(this.slots.map((s) => this.send(s, { op: 'map', fds, fileBytes, size }, [])));
  }

  /** A frame of staging [offset, offset+length), and the layout it chose (planes: GPUCKPT_SHUFFLE's mode). */
  async compress(offset: number, length: number, level: number, planes: PlanesMode = 'off'): Promise<{ data: Uint8Array; planes: Planes }> {
    faultPoint('compress');
    const r = await this.send(this.leastBusy(), { op: 'compress', offset, length, level, planes }, []);
    return { data: new Uint8Array(r.data!), planes: r.planes ?? 0 };
  }

  /** Digests of the blocks of staging [offset, offset+length), as the shim's kernel computes them (8 bytes LE each). */
  async digest(offset: number, length: number, blockSize: number): Promise<Buffer> {
    const r = await this.send(this.leastBusy(), { op: 'digest', offset, length, blockSize }, []);
    return Buffer.from(r.data!);
  }

  /** Bytes [offset, offset+length) of a file, compressed as one frame. */
  async compressFile(path: string, offset: number, length: number, level: number): Promise<Uint8Array> {
    faultPoint('compress');
    const r = await this.send(this.leastBusy(), { op: 'compressFile', path, offset, length, level }, []);
    return new Uint8Array(r.data!);
  }

  /** The frame at [srcOffset, +srcLength) of src, checked and written at dstOffset of dst, its zero pages left as holes. */
  async decompressToFile(src: string, srcOffset: number, srcLength: number, dst: string, dstOffset: number, length: number, what: string): Promise<void> {
    await this.send(this.leastBusy(), { op: 'decompressToFile', src, srcOffset, srcLength, dst, dstOffset, length, what }, []);
  }

  async decompressInto(compressed: Uint8Array, offset: number, length: number, what: string, planes?: 2 | 4): Promise<void> {
    const buf = ownBuffer(compressed);
    await this.send(this.leastBusy(), { op: 'decompress', compressed: buf, offset, length, what, ...(planes ? { planes } : {}) }, [buf]);
  }

  async verify(compressed: Uint8Array, length: number, what: string): Promise<void> {
    const buf = ownBuffer(compressed);
    await this.send(this.leastBusy(), { op: 'verify', compressed: buf, length, what }, [buf]);
  }

  /**
   * Stops the workers once none is inside zstd: a worker terminated in the
   * middle of a native call aborted the whole controller (measured on a
   * 16-core host when a damaged frame failed a restore with other frames
   * in flight). Tasks still queued are cancelled, so this waits for at
   * most one frame per worker. Nobody awaits a task left when the pool
   * closes (the flow that sent it has failed): its promise never settles,
   * as none did when the workers were simply terminated.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      Atomics.store(this.cancelled, 0, 1);
      while (this.pending.size > 0) await new Promise<void>((res) => (this.idle = res));
      await Promise.all(this.slots.map((s) => s.worker.terminate()));
      this.slots.length = 0;
    })();
    return this.closing;
  }

  private leastBusy(): Slot | undefined {
    let best = this.slots[0];
    for (const s of this.slots) if (s.busy < best!.busy) best = s;
    return best;
  }

  private send(slot: Slot | undefined, body: TaskBody, transfer: ArrayBuffer[]): Promise<CodecReply> {
    if (this.failed) return Promise.reject(this.failed);
    if (this.closing || !slot) return Promise.reject(new GpuckptError('INTERNAL', 'codec pool used after close'));
    const id = this.nextId++;
    slot.busy++;
    return new Promise<CodecReply>((resolve, reject) => {
      this.pending.set(id, {
        resolve: (r) => {
          slot.busy--;
          resolve(r);
        },
        reject: (e) => {
          slot.busy--;
          reject(e);
        },
      });
      try {
        slot.worker.postMessage({ ...body, id } as CodecTask, transfer);
      } catch (e) {
        this.pending.delete(id);
        slot.busy--;
        reject(e as Error);
      }
    });
  }

  private settle(r: CodecReply): void {
    const p = this.pending.get(r.id);
    if (!p) return;
    this.pending.delete(r.id);
    if (this.pending.size === 0) this.idle?.();
    if (r.cancelled) return;
    if (r.error) p.reject(new GpuckptError(r.error.code as ErrorCode, r.error.message));
    else p.resolve(r);
  }

  private failAll(e: Error): void {
    this.failed = new GpuckptError('INTERNAL', `codec worker failed: ${e.message}`, { cause: e });
    for (const p of this.pending.values()) p.reject(this.failed);
    this.pending.clear();
    this.idle?.();
  }
}

/** A transferable ArrayBuffer holding exactly these bytes. */
function ownBuffer(bytes: Uint8Array): ArrayBuffer {
  if (bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength && bytes.buffer instanceof ArrayBuffer)
    return bytes.buffer;
  const copy = new Uint8Array(bytes.length);
  copy.set(bytes);
  return copy.buffer;
}
