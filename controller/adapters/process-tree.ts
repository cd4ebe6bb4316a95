/**
 * A job's process tree as /proc shows it: the process given and all its
 * descendants, with what a checkpoint needs to know of each before it
 * touches any: session and group, open files, devices mapped.
 */
import { readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { GpuckptError } from '../base/errors.js';
import { statAfterName } from './processes.js';

export interface TreeProcess {
  pid: number;
  ppid: number;
  pgid: number;
  sid: number;
  /** The command name (/proc/PID/comm). */
  comm: string;
}

export interface OpenFile {
  fd: number;
  /** readlink of /proc/PID/fd/N: a path, 'pipe:[ino]', 'socket:[ino]', 'anon_inode:[eventfd]', ... */
  target: string;
  /** open(2) flags (/proc/PID/fdinfo/N). */
  flags: number;
}

function describe(pid: number): TreeProcess | undefined {
  const f = statAfterName(pid);
  if (!f) return undefined;
  let comm = '';
  try {
    comm = readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    // gone meanwhile: the caller sees no stat next time
  }
  return { pid, ppid: Number(f[1]), pgid: Number(f[2]), sid: Number(f[3]), comm };
}

/** Children of pid, from every one of its threads (a child belongs to the thread that forked it). */
function childrenOf(pid: number): number[] {
  const out: number[] = [];
  let tasks: string[];
  try {
    tasks = readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const tid of tasks) {
    try {
      for (const c of readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').split(' ')) if (c.trim()) out.push(Number(c));
    } catch {
      // the thread ended
    }
  }
  return out;
}

/** root and its descendants, parents before children; refused when root does not run. */
export function readTree(root: number): TreeProcess[] {
  const first = describe(root);
  if (!first) throw new GpuckptError('PID_NOT_RUNNING', `process ${root} is not running`);
  const tree = [first];
  const seen = new Set([root]);
  for (let i = 0; i < tree.length; i++) {
    for (const c of childrenOf(tree[i]!.pid)) {
      if (seen.has(c)) continue;
      seen.add(c);
      const p = describe(c);
      if (p) tree.push(p);
    }
  }
  return tree;
}

/** The open files of pid; those that close meanwhile are left out. */
export function openFiles(pid: number): OpenFile[] {
  let names: string[];
  try {
    names = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return [];
  }
  const out: OpenFile[] = [];
  for (const n of names) {
    try {
      const target = readlinkSync(`/proc/${pid}/fd/${n}`);
      const m = readFileSync(`/proc/${pid}/fdinfo/${n}`, 'utf8').match(/^flags:\s*([0-7]+)/m);
      out.push({ fd: Number(n), target, flags: m ? parseInt(m[1]!, 8) : 0 });
    } catch {
      // closed meanwhile
    }
  }
  return out.sort((a, b) => a.fd - b.fd);
}

const O_ACCMODE = 3;
const O_WRONLY = 1;

/** True for open(2) flags of a file opened write-only. */
export function isWriteOnly(flags: number): boolean {
  return (flags & O_ACCMODE) === O_WRONLY;
}

/** Character devices pid maps, by path (/dev/zero, which stands for shared anonymous memory, left out). */
export function mappedDevices(pid: number): string[] {
  let maps: string;
  try {
    maps = readFileSync(`/proc/${pid}/maps`, 'utf8');
  } catch {
    return [];
  }
  const out = new Set<string>();
  for (const line of maps.split('\n')) {
    const path = line.split(/\s+/).slice(5).join(' ');
    if (!path.startsWith('/dev/') || path.startsWith('/dev/zero') || path.startsWith('/dev/shm/')) continue;
    if (isCharDevice(path)) out.add(path);
  }
  return [...out];
}

function isCharDevice(path: string): boolean {
  try {
    return statSync(path).isCharacterDevice();
  } catch {
    return false;
  }
}

/** The inode of 'pipe:[123]' or 'socket:[123]' targets of the given kind. */
export function inodeOf(target: string, kind: 'pipe' | 'socket'): number | undefined {
  const m = target.match(/^(pipe|socket):\[(\d+)\]$/);
  return m && m[1] === kind ? Number(m[2]) : undefined;
}

/**
 * Every process of the host (but those in skip) holding an fd on target
 * ('pipe:[123]'): who is at the other end of a pipe or socket. Scans /proc,
 * so only for the few targets a check finds leading outside the tree.
 */
export function holdersOf(targets: Set<string>, skip: Set<number>): Map<string, TreeProcess[]> {
  const out = new Map<string, TreeProcess[]>();
  if (!targets.size) return out;
  for (const name of readdirSync('/proc')) {
    const pid = Number(name);
    if (!Number.isInteger(pid) || skip.has(pid)) continue;
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      let target: string;
      try {
        target = readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        continue;
      }
      const holders = out.get(target) ?? [];
      if (!targets.has(target) || holders.some((q) => q.pid === pid)) continue;
      const p = describe(pid);
      if (p) out.set(target, [...holders, p]);
    }
  }
  return out;
}
