/**
 * The driver keeper of a suspended process (native/keeper/driver_keeper.c):
 * a small process that keeps the CUDA driver initialised on this host, with
 * no context and no GPU memory, so that the resume's first driver call does
 * not pay the driver's cold start (0.32 s against 0.035 s on the H200
 * hosts, measured by test/gpu/probes/warm_keeper.c).
 *
 * `gpuckpt suspend` starts it before the pause, while the application still
 * holds the driver (so its own cuInit is quick), and leaves it running,
 * detached, once the process is suspended. The resume ends it once the
 * application holds the driver again; it ends itself when the application
 * exits. Which keeper belongs to which process is on file beside the held
 * data, by PID and start time, so a reused PID is never signalled.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { firstLine, runningStartTime, startTime } from './processes.js';
import { holdBaseDir } from './run-dir.js';
import { packageRoot } from '../../native/index.js';

/** How long a suspend waits, once the GPU is free, for the keeper's cuInit (0.035 s when warm). */
const READY_WAIT_MS = 2000;

interface KeeperRecord {
  pid: number;
  start: string;
}

function recordPath(appPid: number): string {
  return join(holdBaseDir(), `driver-keeper-${appPid}.json`);
}

export function keeperBinary(): string {
  return join(packageRoot(), 'build', 'gpuckpt-driver-keeper');
}

export interface DriverKeeper {
  /**
   * Once the process is suspended: waits for the keeper's cuInit, then lets
   * it run on alone. false (and the keeper ended) when it did not get ready.
   */
  keep(): Promise<boolean>;
  /** The suspend failed: the process runs, the keeper goes. */
  end(): void;
}

/**
 * Starts a keeper for appPid; it is put on file (replacing one left from
 * before) only by keep(), once the process is suspended. undefined when
 * none can be started (not built, or the process is gone): the resume then
 * pays the cold start, nothing else changes.
 */
export function startDriverKeeper(appPid: number): DriverKeeper | undefined {
  const appStart = startTime(appPid);
  const binary = keeperBinary();
  if (!appStart || !existsSync(binary)) return undefined;
  let child: ChildProcess;
  try {
    child = spawn(binary, [String(appPid), appStart], { detached: true, stdio: ['ignore', 'pipe', 'ignore'], cwd: '/' });
  } catch {
    return undefined;
  }
  child.on('error', () => undefined); // a failed spawn reads as never ready
  const ready = firstLine(child).then((line) => line === 'ready');
  const letGo = () => {
    child.stdout?.destroy();
    child.unref();
  };
  // Our own child, not yet reaped: its PID cannot have been reused.
  const end = () => {
    child.kill('SIGTERM');
    letGo();
  };
  return {
    keep: async () => {
      let timer: NodeJS.Timeout | undefined;
      const timedOut = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), READY_WAIT_MS)));
      const ok = await Promise.race([ready, timedOut]);
      clearTimeout(timer);
      const start = ok && child.pid ? startTime(child.pid) : undefined;
      if (!start) {
        end();
        return false;
      }
      endDriverKeeper(appPid);
      mkdirSync(holdBaseDir(), { recursive: true, mode: 0o700 });
      writeFileSync(recordPath(appPid), JSON.stringify({ pid: child.pid!, start } satisfies KeeperRecord));
      letGo();
      return true;
    },
    end,
  };
}

function readRecord(appPid: number): KeeperRecord | undefined {
  try {
    return JSON.parse(readFileSync(recordPath(appPid), 'utf8')) as KeeperRecord;
  } catch {
    return undefined;
  }
}

/** The record's keeper is still the process that was started, and has not ended (one that ended leaves its record behind, and may wait unreaped). */
function stillRuns(rec: KeeperRecord): boolean {
  return Number.isInteger(rec.pid) && rec.pid > 0 && runningStartTime(rec.pid) === rec.start;
}

/**
 * The PID of appPid's keeper on file while it runs, or undefined. A keeper
 * ends by itself with its process, leaving its record; a later process
 * given the same PID must not be taken for that one's.
 */
export function driverKeeperPid(appPid: number): number | undefined {
  const rec = readRecord(appPid);
  return rec && stillRuns(rec) ? rec.pid : undefined;
}

/** Ends appPid's keeper, if one is on file and still the process that was started. */
export function endDriverKeeper(appPid: number): void {
  const rec = readRecord(appPid);
  if (!rec) return;
  rmSync(recordPath(appPid), { force: true });
  if (stillRuns(rec)) {
    try {
      process.kill(rec.pid, 'SIGTERM');
    } catch {
      // gone meanwhile
    }
  }
}
