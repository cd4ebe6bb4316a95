/** Whether a process exists, for every layer (images sweep their dead writers' directories too). */

/** Whether `pid` names a live process (one we may not signal still counts as live). */
export function isAlive(pid: number): boolean {
  if (!Number.isSafeInteger(pid) || pid <= 0) return false; // 0 and below name process groups
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    // ESRCH: no such process. EPERM: it exists but belongs to someone else.
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}
