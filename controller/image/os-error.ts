/**
 * Turning Node's system errors into the short OS text users recognise.
 * Node formats them as "ENOSPC: no space left on device, write" (plus the path
 * for some calls); the user-facing message wants just "no space left on device".
 */

/** True for errors raised by the OS through Node (they carry an errno code like 'ENOSPC'). */
export function isOsError(e: unknown): e is NodeJS.ErrnoException {
  return e instanceof Error && typeof (e as NodeJS.ErrnoException).code === 'string' && /^E[A-Z0-9]+$/.test((e as NodeJS.ErrnoException).code!);
}

/** "no space left on device" for an ENOSPC error; the plain message for anything else. */
export function osErrorText(e: unknown): string {
  if (!(e instanceof Error)) return String(e);
  const m = /^E[A-Z0-9]+: ([^,]+)/.exec(e.message);
  return m ? m[1]! : e.message;
}
