/**
 * Progress on stderr, only when stderr is a terminal (never in pipes, logs
 * or --json runs), redrawn in place at most every 100 ms.
 */
export class Progress {
  private readonly enabled: boolean;
  private last = 0;
  private shown = false;

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

  done(): void {
    if (this.enabled && this.shown) process.stderr.write('\r\x1b[K');
    this.shown = false;
  }
}
