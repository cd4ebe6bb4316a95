/**
 * The CUDA driver's initialisation, started as the command starts. cuInit
 * takes 0.3-0.4 s in a fresh process while no other process has the driver
 * open (test/gpu/probes/restore_probe.c), which is a resume's case when the
 * suspend left no driver keeper (controller/adapters/driver-keeper.ts): the
 * suspended application holds nothing. For the commands whose first driver
 * call is on their critical path, one libuv thread does it while node loads
 * the rest of the CLI and the command connects and checks. Node exits only
 * once that work is done, so no command ends inside cuInit (the CLI never
 * calls process.exit: commander's exits are overridden in main.ts).
 * GPUCKPT_DRIVER_WARMUP=0 turns it off (the bench compares both).
 */
import { native } from '../native/index.js';

const COMMANDS = new Set(['resume', 'migrate', 'suspend']);

export function warmDriverFor(command: string | undefined): void {
  if (!command || !COMMANDS.has(command) || process.env.GPUCKPT_DRIVER_WARMUP === '0') return;
  try {
    native().warmDriver();
  } catch {
    // Not built or no addon: the command itself reports it.
  }
}
