/**
 * Reading /proc on GPU hosts: a thread or process listed may end before
 * it is read. What is gone reads as empty (no children, no command line).
 */
import fs from 'node:fs';

export function readProcFile(file) {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch (e) {
    if (e.code === 'ENOENT' || e.code === 'ESRCH') return '';
    throw e;
  }
}
