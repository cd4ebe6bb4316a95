/**
 * A command line read before commander has loaded, for the work entry.ts
 * starts ahead of a command (driver-warmup.ts, workers-ahead.ts). The
 * command checks its own arguments later and refuses bad ones there.
 */

/** Whether args hold one of these options: alone, or a --long one as --name=value. */
export function hasOption(args: string[], ...names: string[]): boolean {
  return args.some((a) => names.some((n) => a === n || (n.startsWith('--') && a.startsWith(`${n}=`))));
}

/** The value given to --name, as the next word or after =; undefined when absent. */
export function optionValue(args: string[], name: string): string | undefined {
  const at = args.findIndex((a) => a === name || a.startsWith(`${name}=`));
  if (at < 0) return undefined;
  return args[at] === name ? args[at + 1] : args[at]!.slice(name.length + 1);
}
