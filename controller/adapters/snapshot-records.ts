/**
 * What a GPU-held snapshot holds, on file beside the run dir
 * (<run dir>/gpu-snapshots/ID.json): its process, pool layout, allocations
 * and the runs of chunks each part's fds copy. The snapshot holder keeps
 * only fds and bytes; the controller writes these and reads them back.
 */
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** What a snapshot holds, on file at <run dir>/gpu-snapshots/ID.json (the holder keeps only fds). */
export interface SnapshotRecord {
  id: string;
  pid: number;
  startTime: string;
  createdMs: number;
  poolBase: string;
  sliceSize: string;
  chunkSize: string;
  allocations: { device: number; addr: string; size: string }[];
  /** One per GPU the memory is on: its runs of chunks, one allocation (fd) each. */
  parts: { device: number; uuid: string; runs: { addr: string; chunks: number }[] }[];
  rawBytes: number;
  heldBytes: number;
}

export function recordsDir(runDir: string): string {
  return join(runDir, 'gpu-snapshots');
}

export function writeRecord(runDir: string, r: SnapshotRecord): void {
  const dir = recordsDir(runDir);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const path = join(dir, `${r.id}.json`);
  writeFileSync(`${path}.tmp`, JSON.stringify(r), { mode: 0o600 });
  renameSync(`${path}.tmp`, path);
}

export function readRecord(runDir: string, id: bigint): SnapshotRecord | undefined {
  try {
    return JSON.parse(readFileSync(join(recordsDir(runDir), `${id}.json`), 'utf8')) as SnapshotRecord;
  } catch {
    return undefined;
  }
}

/** A record younger than this may be a checkpoint's still handing its snapshot over: never cleared. */
const RECORD_GRACE_MS = 60_000;

/** Records of snapshots the holder no longer holds (held: the ids it does), once no longer young. */
export function clearStaleRecords(runDir: string, held: Set<string>): void {
  let names: string[] = [];
  try {
    names = readdirSync(recordsDir(runDir));
  } catch {
    return;
  }
  for (const n of names) {
    const path = join(recordsDir(runDir), n);
    if (!n.endsWith('.json') || held.has(n.slice(0, -5))) continue;
    try {
      if (Date.now() - statSync(path).mtimeMs > RECORD_GRACE_MS) rmSync(path, { force: true });
    } catch {
      // gone meanwhile
    }
  }
}

export function removeRecord(runDir: string, id: bigint): void {
  rmSync(join(recordsDir(runDir), `${id}.json`), { force: true });
}
