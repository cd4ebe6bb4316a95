/** A word for sh between single quotes: the run plan bin/gpuckpt evals, CRIU's action script. */
export function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}
