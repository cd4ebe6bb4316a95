/**
 * A whole-process restore's and a checkpoint's codec workers, started as
 * the command starts (controller/engine/codec-pool.ts, prestartCodecPool),
 * so that they load their modules while node loads the CLI's: CRIU's
 * pages are unpacked before CRIU starts, and 31 workers took 0.13 s to
 * start there (2x H200); a checkpoint's pool images share them out
 * (a 2-rank job's three pools had booted them inside the pause, beside
 * the ranks' copies). Not for a restore --into (a rollback into a running
 * process), a stream (- or --import: receiving it comes first, and idle
 * workers would only hold memory meanwhile), a checkpoint --to-gpu (kept
 * on the GPU, nothing compressed) or --help; --workers gives their
 * number, as it will to the command.
 */
import { isWorkerCount, prestartCodecPool } from '../controller/engine/codec-pool.js';
import { hasOption, optionValue } from './early-args.js';

export function startWorkersFor(command: string | undefined, args: string[]): void {
  if (hasOption(args, '--help', '-h')) return;
  if (command === 'restore' && (args.includes('-') || hasOption(args, '--into', '--import'))) return;
  if (command === 'checkpoint' && hasOption(args, '--to-gpu')) return;
  if (command !== 'restore' && command !== 'checkpoint') return;
  const text = optionValue(args, '--workers');
  const given = text === undefined ? undefined : Number(text);
  // A bad --workers is the command's to refuse: the default pool is started meanwhile.
  prestartCodecPool(given !== undefined && isWorkerCount(given) ? given : undefined);
}
