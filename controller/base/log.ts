/**
 * The controller's own trace, on stderr, at the level GPUCKPT_LOG names (the
 * shim reads the same variable): at debug, every phase of a command as it
 * ends, so a command that hangs shows the step it is in.
 */
const LEVELS = ['error', 'warn', 'info', 'debug'] as const;
type Level = (typeof LEVELS)[number];

/** The level asked for; warn by default (a bad value is refused before a command runs: environment.ts). */
function wanted(): number {
  const i = LEVELS.indexOf(process.env.GPUCKPT_LOG as Level);
  return i < 0 ? 1 : i;
}

export function logEnabled(level: Level): boolean {
  return LEVELS.indexOf(level) <= wanted();
}

/** One line "gpuckpt[pid] component: text", as the shim writes its own. */
export function log(level: Level, component: string, text: string): void {
  if (logEnabled(level)) process.stderr.write(`gpuckpt[${process.pid}] ${component}: ${text}\n`);
}
