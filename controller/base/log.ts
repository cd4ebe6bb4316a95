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

/**
 * One line "gpuckpt[pid] component: text", as the shim writes its own; at
 * debug also the time of day (UTC, as the shim's debug lines, so the
 * application's trace lines up) and "+S.SSSs", seconds since the command
 * started: a trace shows where the time went.
 */
export function log(level: Level, component: string, text: string): void {
  if (!logEnabled(level)) return;
  const at = level === 'debug' ? ` ${new Date().toISOString().slice(11, 23)} +${(performance.now() / 1000).toFixed(3)}s` : '';
  process.stderr.write(`gpuckpt[${process.pid}]${at} ${component}: ${text}\n`);
}
