/** At most n tasks at once; the rest wait their turn in order. */
export class Limiter {
  /** Tasks running, and those handed a slot that have not started yet. */
  private active = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private n: number) {}

  /** From now on at most n at once: more lets waiting tasks start now; fewer lets running ones finish. */
  setLimit(n: number): void {
    this.n = n;
    while (this.active < this.n && this.waiting.length) {
      this.active++;
      this.waiting.shift()!();
    }
  }

  async run<T>(task: () => Promise<T>): Promise<T> {
    // A waiter is handed the slot of the task it follows: nobody arriving
    // meanwhile can take it.
    if (this.active >= this.n) await new Promise<void>((resolve) => this.waiting.push(resolve));
    else this.active++;
    try {
      return await task();
    } finally {
      if (this.active <= this.n && this.waiting.length) this.waiting.shift()!();
      else this.active--;
    }
  }
}
