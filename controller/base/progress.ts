import { formatBytes } from './units.js';

/**
 * "what: done of total (pct %), rate, time left" for a step that moves
 * bytes, measured from its start (ms, performance.now()).
 */
export function transferLine(what: string, done: number, total: number, startMs: number, nowMs = performance.now()): string {
  const seconds = Math.max((nowMs - startMs) / 1000, 1e-3);
  const rate = done / seconds;
  const pct = total > 0 ? Math.min(100, Math.floor((100 * done) / total)) : 100;
  const left = rate > 0 && total > done ? (total - done) / rate : 0;
  const eta = left >= 60 ? `${Math.floor(left / 60)} min ${Math.round(left % 60)} s` : `${left.toFixed(left < 10 ? 1 : 0)} s`;
  return `${what}: ${formatBytes(done)} of ${formatBytes(total)} (${pct} %), ${formatBytes(rate)}/s, ${eta} left`;
}

/**
 * Progress on stderr, only when stderr is a terminal (never in pipes, logs
 * or --json runs), redrawn in place at most every 100 ms.
 */
export class Progress {
  private readonly enabled: boolean;
  private last = 0;
  private shown = false;
  private started = new Map<string, number>();

  constructor(enabled = process.stderr.isTTY === true) {
    this.enabled = enabled;
  }

  update(text: string): void {
    if (!this.enabled) return;
    const now = Date.now();
    if (now - this.last < 100) return;
    this.last = now;
    process.stderr.write(`\r\x1b[K${text}`);
    this.shown = true;
  }

  /** A step that moves bytes: done of total, its rate and time left (from its first call). */
  transfer(what: string, done: number, total: number): void {
    if (!this.enabled) return;
    const start = this.started.get(what) ?? performance.now();
    this.started.set(what, start);
    this.update(transferLine(what, done, total, start));
  }

  done(): void {
    if (this.enabled && this.shown) process.stderr.write('\r\x1b[K');
    this.shown = false;
  }
}
