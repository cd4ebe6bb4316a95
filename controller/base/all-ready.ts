/**
 * Runs an action once, when every one of a known number of parties is
 * ready, and hands each of them its result; a party that fails before it
 * is ready fails the others' wait with its error instead of leaving them
 * waiting for it.
 */
export class AllReady<T> {
  private left: number;
  private failure: { error: unknown } | undefined;
  private readonly allIn: Promise<void>;
  private open!: () => void;
  private result: Promise<T> | undefined;

  constructor(
    parties: number,
    private readonly act: () => Promise<T>,
  ) {
    this.left = parties;
    this.allIn = new Promise<void>((resolve) => (this.open = resolve));
    if (parties <= 0) this.open();
  }

  /** This party is ready: resolves with the action's result once all are, and it has run. */
  ready(): Promise<T> {
    if (--this.left === 0) this.open();
    return this.outcome();
  }

  /** This party failed; before the action, the others' waits fail with error. */
  fail(error: unknown): void {
    this.failure ??= { error };
    this.open();
  }

  private outcome(): Promise<T> {
    this.result ??= this.allIn.then(() => {
      if (this.failure) throw this.failure.error;
      return this.act();
    });
    return this.result;
  }
}
