/**
 * Where the time of a command goes: each mark closes a phase that began at
 * the previous mark. Suspend and resume report it, so a figure that misses
 * its target says which step is to blame (measured, not guessed).
 */
import { log } from './log.js';
import { round } from './units.js';

export type Phases = Record<string, number>;

export class PhaseClock {
  readonly phases: Phases = {};
  private last: number;

  /** what: the command, in the trace; since: where the first phase began (default: now). */
  constructor(
    private readonly what: string,
    since = performance.now(),
  ) {
    this.last = since;
  }

  /** Seconds since the previous mark are charged to name (added, when it recurs). */
  mark(name: string): void {
    const t = performance.now();
    this.phases[name] = round((this.phases[name] ?? 0) + (t - this.last) / 1000, 4);
    log('debug', this.what, `${name} done in ${((t - this.last) / 1000).toFixed(3)} s`);
    this.last = t;
  }
}
