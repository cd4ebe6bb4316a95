/**
 * Typed face of the native addon (native/src). The addon stays thin: it
 * speaks the protocol (protocol/messages.mjs; its types and constants are
 * protocol.gen.ts) and maps shared memory; everything else is TypeScript.
 */
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export * from './protocol.gen.js';

/** CUprocessState of the driver checkpoint API. */
export const DriverProcessState = { RUNNING: 0, LOCKED: 1, CHECKPOINTED: 2, FAILED: 3 } as const;

/** Errors the addon raises carry the errno; `transport` tells a socket
 * failure from a refusal by the shim. */
export interface NativeError extends Error {
  errno?: number;
  code?: string;
  transport?: boolean;
  /** An error reply's text: the driver call that failed and its CUresult. */
  detail?: string;
}

interface NativeSession {
  /** fds: sent along (SCM_RIGHTS); they stay open here. */
  request(type: number, args?: object, timeoutMs?: number, fds?: number[]): Promise<any>;
  close(): void;
  /** The listening process's PID here (SO_PEERCRED); 0 where the kernel cannot say. */
  peerPid(): number;
}

interface NativeModule {
  Session: new (socketPath: string) => NativeSession;
  /** Maps [offset, offset+length) of files laid end to end, fileBytes each (the shim's staging memfds); length <= 4 GiB, offset page-aligned. */
  mapFiles(fds: number[], fileBytes: bigint | number, size: bigint | number, offset: bigint | number, length: bigint | number): ArrayBuffer;
  /** Unmaps a mapFiles buffer at once and detaches it. */
  unmapFiles(buffer: ArrayBuffer): void;
  /** One mapping of the whole of files laid end to end, for every thread: its address. */
  mapShared(fds: number[], fileBytes: bigint | number, size: bigint | number): bigint;
  /** Unmaps a mapShared mapping off the main thread; no view of it may be used after the call. */
  unmapShared(address: bigint): Promise<void>;
  /** An ArrayBuffer over [address, address+length) inside a live mapShared mapping (length <= 4 GiB); collecting it unmaps nothing. */
  viewAt(address: bigint, length: number): ArrayBuffer;
  closeFd(fd: number): void;
  /** O_NONBLOCK cleared (blocking) or set on fd; whether it was blocking before. */
  setBlocking(fd: number, blocking: boolean): boolean;
  /** fd's pipe buffer raised to the most a user may give (1 MiB by default); its size after, 0 for no pipe. */
  growPipe(fd: number): number;
  /** fd pointed at /dev/null: its pipe's reader sees the end now, not at this process's exit. */
  endOutput(fd: number): void;
  /** A named pipe at path, mode 0600; throws with the errno (EEXIST where something is there). */
  makeFifo(path: string): void;
  /** A tmpfs of at most bytes with huge pages on the directory path (scratch_mount.h); throws with the errno (EPERM without the right to mount). */
  mountHugeTmpfs(path: string, bytes: number): void;
  /** The mount on path detached; throws with the errno (EINVAL where path is no mount point). */
  unmountLazy(path: string): void;
  /** A fresh memfd of size bytes, sealed against resizing (what the shim asks of staging it is given). */
  createMemfd(size: bigint | number): number;
  probeDriver(): { driver: boolean; devices: number; error?: string };
  /** cuCheckpointProcess* on another process; result is the CUresult, -1 without the API. */
  driverCheckpoint(
    op: 'state' | 'lock' | 'checkpoint' | 'restore' | 'unlock',
    pid: number,
    pairs?: { from: string; to: string }[],
  ): Promise<{ result: number; state?: number }>;
  listGpus(): { ordinal: number; name: string; uuid: string }[];
  /** Loads and initialises the CUDA driver (cuInit) on a libuv thread, resolved when done; later driver calls wait for it. */
  warmDriver(): Promise<void>;
  /** chunkSize bytes each on the GPU with that UUID, exported as POSIX fds (the caller's to close); rejects with cuResult set. */
  createPeerChunks(uuid: string, chunkSize: number, count: number): Promise<number[]>;
  /** The chunks behind fds (chunkBytes each, on the GPU with that UUID) mapped into this process: the route that served, or why each failed (bar_map.h). */
  barMap(fds: number[], chunkBytes: number, uuid: string, routes?: string[]): { id: number; route: 'mmap' | 'vulkan' } | { tried: string[] };
  /** length bytes from offset of a barMap's chunks laid end to end. */
  barRead(id: number, offset: number, length: number): Buffer;
  /** data written at offset of a barMap's chunks, fenced. */
  barWrite(id: number, offset: number, data: Uint8Array): void;
  barUnmap(id: number): void;
  /** NVML's view; null without NVML. */
  gpuMemory(): { uuid: string; free: bigint; total: bigint }[] | null;
  /** What one process holds per GPU; null when NVML cannot say. */
  processGpuMemory(pid: number): { uuid: string; bytes: bigint }[] | null;
  protocolVersion: number;
  /** Queues the dirty pages of the file behind fd for writeback (sync_file_range, whole file) without waiting for them; rejects with code set to the errno name. */
  startWriteback(fd: number): Promise<void>;
  /** Reaps a child libuv did not start (waitid): its exit code, or the signal that ended it; rejects with code 'ECHILD' for a pid that is not a child. */
  waitChild(pid: number): Promise<{ code: number | null; signal: number | null }>;
  /** One 64-bit LE digest per block of view, as the shim's kernel computes them (block_digest_fn.h). */
  hostBlockDigests(view: Uint8Array, blockSize: number): Buffer;
  /** dst gets src's byte planes of size-byte elements (inverse: planes back into elements); same lengths. */
  byteplanes(src: Uint8Array, dst: Uint8Array, size: 2 | 4, inverse: boolean): void;
  /** A zstd frame of src's bytes in raw blocks (content size, XXH64 checksum) written into dst; its length. */
  storedZstdFrame(src: Uint8Array, dst: Uint8Array): number;
  /** The host's Unix sockets (sock_diag): peer 0 when unconnected, name '' when unbound, '@...' abstract; throws with code set to the errno name. */
  unixSockets(): UnixSocketInfo[];
}

export interface UnixSocketInfo {
  inode: number;
  peer: number;
  name: string;
  /** SOCK_STREAM 1, SOCK_DGRAM 2, SOCK_SEQPACKET 5. */
  type: number;
  /** TCP_ESTABLISHED 1, TCP_LISTEN 10, ... as the kernel reports unix sockets' states. */
  state: number;
}

/** Repository root, found from this file whether it runs from source or dist/. */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 4; i++) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    dir = resolve(dir, '..');
  }
  throw new Error('gpuckpt: cannot find the package root');
}

let cached: NativeModule | undefined;

export function native(): NativeModule {
  if (!cached) {
    const require = createRequire(import.meta.url);
    cached = require(join(packageRoot(), 'native', 'build', 'Release', 'gpuckpt_native.node')) as NativeModule;
  }
  return cached;
}

export type { NativeSession };
