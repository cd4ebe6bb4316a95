/**
 * gpuckpt's word to `criu dump` between writing its files and ending the
 * tree: an action script that CRIU runs at post-dump waits for it. CRIU 4.1
 * (cr_dump_finish) lets the tree run on when that script fails, so the
 * image is made complete first, and a controller that fails meanwhile, or
 * dies (its end closes the pipe the script reads), leaves the job running.
 */
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { shellQuote } from '../base/shell-quote.js';
import { native } from '../../native/index.js';
import { isAlive } from '../base/pid-alive.js';
import { ownRunDir } from './run-dir.js';

const PREFIX = 'criu-gate-';

/** Any action but post-dump passes; at post-dump, "dumped" is made, then the answer read: "go", or the tree runs on. */
function scriptText(dir: string): string {
  return [
    '#!/bin/sh',
    '# gpuckpt (controller/adapters/criu-gate.ts): the dumped tree ends only on gpuckpt\'s word.',
    '[ "$CRTOOLS_SCRIPT_ACTION" = post-dump ] || exit 0',
    // Read-write first, so that the read-only open never waits for a writer;
    // read-only then: an end of file once gpuckpt has closed it or ended.
    `exec 3<> ${shellQuote(join(dir, 'answer'))} 4< ${shellQuote(join(dir, 'answer'))} 3>&-`,
    // Said once the pipe is open here: an answer written from now on is kept for this read.
    `: > ${shellQuote(join(dir, 'dumped'))}`,
    'read -r word <&4 && [ "$word" = go ]',
    '',
  ].join('\n');
}

export class DumpGate {
  private constructor(
    private readonly dir: string,
    /** For CRIU's --action-script. */
    readonly script: string,
    private fd: number | undefined,
  ) {}

  static open(): DumpGate {
    const base = ownRunDir();
    mkdirSync(base, { recursive: true, mode: 0o700 });
    removeStaleGates(base);
    const dir = mkdtempSync(join(base, `${PREFIX}${process.pid}-`));
    try {
      native().makeFifo(join(dir, 'answer'));
      // Read and write: the script's open need not wait for a writer, and
      // it reads an end of file once this process has closed it or ended.
      const fd = openSync(join(dir, 'answer'), 'r+');
      const script = join(dir, 'post-dump');
      writeFileSync(script, scriptText(dir), { mode: 0o700 });
      return new DumpGate(dir, script, fd);
    } catch (e) {
      rmSync(dir, { recursive: true, force: true });
      throw e;
    }
  }

  /** CRIU has written its files and waits for the word. */
  get reached(): boolean {
    return existsSync(join(this.dir, 'dumped'));
  }

  /** go: CRIU ends the tree (or leaves it running, as asked); else the tree runs on. Once. */
  answer(go: boolean): void {
    if (this.fd === undefined) return;
    try {
      writeSync(this.fd, go ? 'go\n' : 'no\n');
    } finally {
      closeSync(this.fd);
      this.fd = undefined;
    }
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
