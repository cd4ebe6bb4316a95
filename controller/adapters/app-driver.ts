/**
 * Drives a program that speaks the sample-application protocol (the demo
 * program and the test programs): commands on stdin, one JSON line per
 * answer on stdout. See cli/demo/demo_app.cu.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { GpuckptError } from '../base/errors.js';

export interface BufferState {
  device: number;
  addr: string;
  size: number;
  checksum: string;
}

export interface AppEvent {
  event: string;
  pid?: number;
  buffers?: BufferState[];
  reason?: string;
  [k: string]: unknown;
}

export class AppDriver {
  readonly child: ChildProcess;
  private readonly lines: string[] = [];
  private waiting: ((line: string | undefined) => void) | undefined;
  private ended = false;
  stderr = '';

  constructor(program: string, args: string[], env: NodeJS.ProcessEnv) {
    this.child = spawn(program, args, { env, stdio: ['pipe', 'pipe', 'pipe'] });
    createInterface({ input: this.child.stdout! }).on('line', (l) => this.push(l));
    this.child.stdout!.on('end', () => {
      this.ended = true;
      this.waiting?.(undefined);
    });
    this.child.stderr!.on('data', (d) => (this.stderr += d.toString()));
    // A program that died cannot take commands; next() reports that.
    this.child.stdin!.on('error', () => undefined);
    this.child.on('error', () => {
      this.ended = true;
      this.waiting?.(undefined);
    });
  }

  get pid(): number {
    return this.child.pid!;
  }

  private push(line: string): void {
    if (this.waiting) {
      const w = this.waiting;
      this.waiting = undefined;
      w(line);
    } else this.lines.push(line);
  }

  /** The next JSON event, or an error naming what the program said last. */
  async next(timeoutMs = 120_000): Promise<AppEvent> {
    const line =
      this.lines.shift() ??
      (this.ended
        ? undefined
        : await new Promise<string | undefined>((resolve) => {
            const t = setTimeout(() => {
              this.waiting = undefined;
              resolve(undefined);
            }, timeoutMs);
            this.waiting = (l) => {
              clearTimeout(t);
              resolve(l);
            };
          }));
    if (line === undefined) {
      const tail = this.stderr.trim().split('\n').slice(-3).join(' | ');
      throw new GpuckptError('INTERNAL', `the sample program stopped answering${tail ? `: ${tail}` : ''}`);
    }
    try {
      return JSON.parse(line) as AppEvent;
    } catch {
      throw new GpuckptError('INTERNAL', `the sample program printed something unexpected: ${line}`);
    }
  }

  async command(cmd: string): Promise<AppEvent> {
    this.child.stdin!.write(cmd + '\n');
    return this.next();
  }

  async quit(): Promise<number | null> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return this.child.exitCode;
    const exited = new Promise<number | null>((resolve) => this.child.once('exit', (code) => resolve(code)));
    try {
      this.child.stdin!.write('quit\n');
    } catch {
      /* already gone */
    }
    const t = setTimeout(() => this.child.kill('SIGKILL'), 10_000);
    const code = await exited;
    clearTimeout(t);
    return code;
  }
}

export function sameBuffers(a: BufferState[] | undefined, b: BufferState[] | undefined): boolean {
  if (!a || !b || a.length !== b.length) return false;
  return a.every((x, i) => x.addr === b[i]!.addr && x.size === b[i]!.size && x.checksum === b[i]!.checksum && x.device === b[i]!.device);
}
