/**
 * gpuckpt's word to CRIU at one step: an action script that CRIU runs there
 * waits for it, and fails unless the word is "go". A controller that dies
 * meanwhile closes the pipe the script reads, which fails it too.
 * - post-dump, between writing its files and ending the tree: CRIU 4.1
 *   (cr_dump_finish) lets the tree run on when the script fails, so the
 *   image is made complete first, and a failure leaves the job running.
 * - post-restore, with every process brought back and none run yet: CRIU
 *   (restore_root_task) ends them all when the script fails, so the GPU
 *   checks can run beside CRIU and still refuse before anything runs.
 */
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { shellQuote } from '../base/shell-quote.js';
import { native } from '../../native/index.js';
import { isAlive } from '../base/pid-alive.js';
import { ownRunDir } from './run-dir.js';

const PREFIX = 'criu-gate-';

export type GateStep = 'post-dump' | 'post-restore';

/** Any action but step passes; at step, "reached" is made, then the answer read: "go" passes. */
function scriptText(dir: string, step: GateStep): string {
  return [
    '#!/bin/sh',
    `# gpuckpt (controller/adapters/criu-gate.ts): CRIU goes on past ${step} only on gpuckpt's word.`,
    `[ "$CRTOOLS_SCRIPT_ACTION" = ${step} ] || exit 0`,
    // Read-write first, so that the read-only open never waits for a writer;
    // read-only then: an end of file once gpuckpt has closed it or ended.
    `exec 3<> ${shellQuote(join(dir, 'answer'))} 4< ${shellQuote(join(dir, 'answer'))} 3>&-`,
    // Said once the pipe is open here: an answer written from now on is kept for this read.
    `: > ${shellQuote(join(dir, REACHED))}`,
    'read -r word <&4 && [ "$word" = go ]',
    '',
  ].join('\n');
}

const REACHED = 'reached';

export class CriuGate {
  private constructor(
    private readonly dir: string,
    /** For CRIU's --action-script. */
    readonly script: string,
    private fd: number | undefined,
  ) {}

  private answered = false;

  static open(step: GateStep): CriuGate {
    const base = ownRunDir();
    mkdirSync(base, { recursive: true, mode: 0o700 });
    removeStaleGates(base);
    const dir = mkdtempSync(join(base, `${PREFIX}${process.pid}-`));
    try {
      native().makeFifo(join(dir, 'answer'));
      // Read and write: the script's open need not wait for a writer, and
      // it reads an end of file once this process has closed it or ended.
      const fd = openSync(join(dir, 'answer'), 'r+');
      const script = join(dir, step);
      writeFileSync(script, scriptText(dir, step), { mode: 0o700 });
      return new CriuGate(dir, script, fd);
    } catch (e) {
      rmSync(dir, { recursive: true, force: true });
      throw e;
    }
  }

  /** CRIU is at the step and waits for the word. */
  get reached(): boolean {
    return existsSync(join(this.dir, REACHED));
  }

  /**
   * go: CRIU goes on (a dump ends the tree or leaves it running, as asked;
   * a restore lets it run); else a dump's tree runs on, a restore's ends.
   * Once. The pipe stays open until close(): an answer given before the
   * script opened it is kept for its read, which a closed pipe would lose.
   */
  answer(go: boolean): void {
    if (this.fd === undefined || this.answered) return;
    this.answered = true;
    writeSync(this.fd, go ? 'go\n' : 'no\n');
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Gates of controllers that are gone (killed): their CRIU has read its end of file already. */
function removeStaleGates(base: string): void {
  for (const name of readdirSync(base)) {
    const pid = Number(/^criu-gate-(\d+)-/.exec(name)?.[1]);
    if (pid && pid !== process.pid && !isAlive(pid)) rmSync(join(base, name), { recursive: true, force: true });
  }
}
