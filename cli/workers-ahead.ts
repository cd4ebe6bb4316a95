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
import { prestartCodecPool } from '../controller/engine/codec-pool.js';

export function startWorkersFor(command: string | undefined, args: string[]): void {
  const not = ['--help', '-h', '-', '--into', '--import'];
  if (command !== 'restore' || args.some((a) => not.includes(a) || a.startsWith('--into=') || a.startsWith('--import='))) return;
  const at = args.findIndex((a) => a === '--workers' || a.startsWith('--workers='));
  const given = at < 0 ? undefined : Number(args[at]!.includes('=') ? args[at]!.split('=')[1] : args[at + 1]);
  // A bad --workers is the command's to refuse: the default pool is started meanwhile.
  prestartCodecPool(given !== undefined && Number.isInteger(given) && given >= 1 && given <= 256 ? given : undefined);
}
