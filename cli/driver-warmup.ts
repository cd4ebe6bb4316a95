/**
 * The CUDA driver's initialisation, started as the command starts. cuInit
 * takes 0.3-0.5 s in a fresh process while no other process has the driver
 * open (test/gpu/probes/restore_probe.c), which is a resume's case when the
 * suspend left no driver keeper (controller/adapters/driver-keeper.ts): the
 * suspended application holds nothing; and a whole-process restore's, whose
 * processes CRIU has yet to bring back. For the commands whose first driver
 * call is on their critical path, one libuv thread does it while node loads
 * the rest of the CLI and the command connects and checks (a restore awaits
 * it, native().warmDriver() again, only where it needs the driver). Node
 * exits only once that work is done, so no command ends inside cuInit (the
 * CLI never calls process.exit: commander's exits are overridden in
 * main.ts); a restore --into, which needs no driver here, does not start it.
 * GPUCKPT_DRIVER_WARMUP=0 turns it off (the bench compares both).
 */
import { native } from '../native/index.js';
import { hasOption } from './early-args.js';

const COMMANDS = new Set(['resume', 'migrate', 'suspend', 'restore']);

export function warmDriverFor(command: string | undefined, args: string[]): void {
  if (!command || !COMMANDS.has(command) || process.env.GPUCKPT_DRIVER_WARMUP === '0') return;
  if (hasOption(args, '--help', '-h')) return;
  if (command === 'restore' && hasOption(args, '--into')) return;
  try {
    native().warmDriver().catch(() => undefined);
  } catch {
    // Not built or no addon: the command itself reports it.
  }
}
