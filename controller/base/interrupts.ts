/**
 * Ctrl-C (SIGINT) or SIGTERM during a step that must not be cut short: the
 * first is noted, and the command undoes its work at its next safe point
 * (check); a second ends the command at once, saying what it leaves.
 */
import { constants } from 'node:os';
import { GpuckptError } from './errors.js';
import { log } from './log.js';

const SIGNALS: NodeJS.Signals[] = ['SIGINT', 'SIGTERM'];
/** The exit status of a command a signal ended, as a shell gives it. */
const statusOf = (sig: NodeJS.Signals) => 128 + (constants.signals[sig] ?? 0);

export class Interrupts {
  private got: NodeJS.Signals | undefined;
  private readonly onSignal = (sig: NodeJS.Signals) => {
    if (this.got) {
      process.stderr.write(`gpuckpt: ${sig} again: ${this.leaves}\n`);
      process.exit(statusOf(sig));
    }
    this.got = sig;
    log('warn', this.what, `${sig}: ${this.undo} (a second one ends gpuckpt now: ${this.leaves})`);
  };

  /** what: the command, in the notice; undo: what happens at the next safe point; leaves: what ending at once leaves. */
  private constructor(
    private readonly what: string,
    private readonly undo: string,
    private readonly leaves: string,
  ) {
    for (const s of SIGNALS) process.on(s, this.onSignal);
  }

  static watch(what: string, undo: string, leaves: string): Interrupts {
    return new Interrupts(what, undo, leaves);
  }

  /** Throws INTERRUPTED (exit status 128 + the signal) once a signal came. */
  check(): void {
    if (!this.got) return;
    throw new GpuckptError('INTERRUPTED', `interrupted by ${this.got}`, { exitStatus: statusOf(this.got) });
  }

  close(): void {
    for (const s of SIGNALS) process.off(s, this.onSignal);
  }
}
