/** A promise that settles when open() is called, once; later calls do nothing. */
export class Latch {
  readonly opened: Promise<void>;
  open!: () => void;

  constructor() {
    this.opened = new Promise<void>((resolve) => (this.open = resolve));
  }
}
