/**
 * A whole-process restore's codec workers, started as the command starts
 * (controller/engine/codec-pool.ts, prestartCodecPool), so that they load
 * their modules while node loads the CLI's: CRIU's pages are unpacked
 * before CRIU starts, and 31 workers took 0.13 s to start there (2x H200).
 * Not for --into (a rollback into a running process), a stream (- or
 * --import: receiving it comes first, and idle workers would only hold
 * memory meanwhile) or --help; --workers gives their number, as it will
 * to the restore.
 */
import { isWorkerCount, prestartCodecPool } from '../controller/engine/codec-pool.js';
import { hasOption, optionValue } from './early-args.js';

export function startWorkersFor(command: string | undefined, args: string[]): void {
  if (command !== 'restore' || args.includes('-') || hasOption(args, '--help', '-h', '--into', '--import')) return;
  const text = optionValue(args, '--workers');
  const given = text === undefined ? undefined : Number(text);
  // A bad --workers is the command's to refuse: the default pool is started meanwhile.
  prestartCodecPool(given !== undefined && isWorkerCount(given) ? given : undefined);
}
