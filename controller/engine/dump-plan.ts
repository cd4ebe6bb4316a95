/**
 * Everything a whole-process checkpoint can know before it touches the
 * job: its process tree, which of its processes run CUDA under gpuckpt
 * (each saves its own pool), and what CRIU will meet in it. What CRIU
 * cannot carry is refused here, in one line that names the process and
 * what to do; what it can carry with the right options gets them:
 *
 * - a session or process group led from outside the tree (a job started
 *   from a script with &, under timeout, in a terminal): --shell-job, and
 *   the restored job joins the session of the restoring command;
 * - standard input, output or error that are a pipe or a Unix socket to a
 *   process outside the job (`app | tee log`, a service's journal): the
 *   restore connects them to the restoring command's own;
 * - a terminal: --shell-job, and the restore must run in a terminal;
 * - files deleted while open (carried in the image): --ghost-limit raised
 *   to the largest.
 *
 * docs/RELIABILITY.md lists the cases with what was seen on GPU hosts.
 */
import { fstatSync, openSync, closeSync } from 'node:fs';
import { release } from 'node:os';
import { criuAsksPasscredOnInet, type Criu } from '../adapters/criu.js';
import { GpuckptError } from '../base/errors.js';
import { describeInet, inetSockets, type InetSocket } from '../adapters/inet-sockets.js';
import { holdersOf, inodeOf, isWriteOnly, mappedDevices, openFiles, readTree, type OpenFile, type TreeProcess } from '../adapters/process-tree.js';
import { hasShimLoaded } from '../adapters/processes.js';
import { isCudaMember } from '../adapters/jobs.js';
import { formatBytes } from '../base/units.js';
import { native, type UnixSocketInfo } from '../../native/index.js';

/** A standard stream of the job's first process that leads outside the job: the restore gives it its own. */
export interface ExternalStdio {
  fd: 0 | 1 | 2;
  /** CRIU's name for it in --inherit-fd: 'pipe:[123]' or 'socket:[123]'. */
  resource: string;
}

export interface DumpPlan {
  tree: TreeProcess[];
  /** The processes that run CUDA under gpuckpt: each one's pool is saved. The first is the image's own pool. */
  members: number[];
  /** Options for `criu dump` (and, for --shell-job, `criu restore`). */
  criuArgs: string[];
  /** Options `criu restore` needs as well (--tcp-established). */
  restoreArgs: string[];
  shellJob: boolean;
  /** The terminal the job uses, when it uses one: the restore must run in a terminal too. */
  terminal?: string;
  externalStdio: ExternalStdio[];
  /** What was arranged, for the summary: one short line each. */
  notes: string[];
}

const GPU_DEVICE = /^\/dev\/(nvidia|dri\/|kfd)/;
const NVIDIA_DEVICE = /^\/dev\/nvidia/;
const CRIU_DEFAULT_GHOST_LIMIT = 1 << 20;
/** sock_diag's state of a connected Unix stream socket (TCP_ESTABLISHED). */
const UNIX_CONNECTED = 1;
/** anon_inode kinds CRIU 4.x cannot dump. */
const UNDUMPABLE_ANON = /^anon_inode:\[?(io_uring|perf_event|userfaultfd|bpf-prog|bpf_link|dmabuf)/;

/** This CRIU cannot save TCP and UDP sockets here: it asks what the kernel refuses, and gpuckpt has no answer to preload. */
function criuFailsOnInet(criu: Criu): boolean {
  return criuAsksPasscredOnInet(criu.version) && !criu.compat;
}

function who(p: TreeProcess): string {
  return `process ${p.pid} (${p.comm})`;
}

function hasOption(criuOpts: string[], ...names: string[]): boolean {
  return criuOpts.some((o) => names.some((n) => o === n || o.startsWith(`${n}=`)));
}

/** The size of the file behind an fd of pid (through /proc, so a deleted file too); 0 when unknown. */
function sizeOf(pid: number, fd: number): number {
  try {
    const f = openSync(`/proc/${pid}/fd/${fd}`, 'r');
    try {
      return fstatSync(f).size;
    } finally {
      closeSync(f);
    }
  } catch {
    return 0;
  }
}

/**
 * The checks and CRIU options for checkpointing the tree of root, or a
 * GpuckptError naming the first thing CRIU could not carry. Nothing is
 * touched.
 */
export function planDump(root: number, criu: Criu, criuOpts: string[] = []): DumpPlan {
  const tree = readTree(root);
  const first = tree[0]!;
  if (!hasShimLoaded(root))
    throw new GpuckptError('NOT_UNDER_GPUCKPT', `process ${root} is not running under gpuckpt (start it with gpuckpt run -- PROGRAM)`);
  const members = tree.filter((p) => isCudaMember(p.pid)).map((p) => p.pid);
  if (!members.length)
    throw new GpuckptError('NOT_UNDER_GPUCKPT', `process ${root} and its children have not started CUDA yet, so there is nothing on a GPU to save: checkpoint it once it has`);
  const inTree = new Set(tree.map((p) => p.pid));
  const plan: DumpPlan = { tree, members, criuArgs: [], restoreArgs: [], shellJob: false, externalStdio: [], notes: [] };

  if (first.sid !== root || (first.pgid !== root && !inTree.has(first.pgid))) {
    plan.shellJob = true;
    plan.notes.push(`started from a shell or another program (session ${first.sid}, group ${first.pgid}): restored into the session of the restoring command`);
  }

  const files = new Map(tree.map((p) => [p.pid, openFiles(p.pid)]));
  const inetFailing = criuFailsOnInet(criu);
  const tcpAllowed = hasOption(criuOpts, '--tcp-established', '--tcp-close');
  const unixAllowed = hasOption(criuOpts, '--ext-unix-sk');
  let unix: Map<number, UnixSocketInfo> | undefined;
  const unixSockets = () => (unix ??= new Map(native().unixSockets().map((s) => [s.inode, s])));
  const socketInodes = new Set<number>();
  let biggestDeleted = 0;
  const established: { p: TreeProcess; s: InetSocket }[] = [];

  for (const p of tree) {
    const member = members.includes(p.pid);
    for (const dev of mappedDevices(p.pid)) {
      if (member && NVIDIA_DEVICE.test(dev)) continue; // the driver's checkpoint releases them
      throw new GpuckptError('CRIU_CANNOT', GPU_DEVICE.test(dev) ? usesGpuOutside(p, dev) : `${who(p)} maps the device ${dev}, which CRIU cannot save`);
    }
    let inet: Map<number, InetSocket> | undefined;
    for (const f of files.get(p.pid)!) {
      if (GPU_DEVICE.test(f.target) && !(member && NVIDIA_DEVICE.test(f.target)))
        throw new GpuckptError('CRIU_CANNOT', usesGpuOutside(p, f.target));
      if (f.target.startsWith('/dev/infiniband/'))
        throw new GpuckptError('CRIU_CANNOT', `${who(p)} has ${f.target} open (RDMA), which CRIU cannot save`);
      if (UNDUMPABLE_ANON.test(f.target))
        throw new GpuckptError(
          'CRIU_CANNOT',
          `${who(p)} fd ${f.fd} is ${f.target}, which CRIU cannot save${f.target.includes('io_uring') ? ' (gpuckpt run refuses io_uring to its jobs unless GPUCKPT_ALLOW_IO_URING=1, and libuv then does without)' : ''}`,
        );
      if (/^\/dev\/(pts\/\d+|tty\w*|console)$/.test(f.target)) {
        plan.shellJob = true;
        plan.terminal ??= f.target;
      }
      if (f.target.endsWith(' (deleted)') && f.target.startsWith('/') && !f.target.startsWith('/memfd:')) biggestDeleted = Math.max(biggestDeleted, sizeOf(p.pid, f.fd));
      const sock = inodeOf(f.target, 'socket');
      if (sock === undefined) continue;
      socketInodes.add(sock);
      const s = (inet ??= inetSockets(p.pid)).get(sock);
      if (!s) continue;
      if (inetFailing)
        throw new GpuckptError('CRIU_CANNOT', `${who(p)} holds ${describeInet(s)}, and CRIU ${criu.version} cannot save TCP or UDP sockets on Linux ${release()} (it asks for SO_PASSCRED, refused since Linux 6.16; fixed in CRIU 4.2): close the socket before the checkpoint, or use CRIU 4.2 or newer`);
      if (s.state === 'established') established.push({ p, s });
    }
  }
  // Connections between the job's own processes (a launcher's store and its
  // ranks) are carried whole: both ends are frozen, so nothing needs locking.
  const ends = new Set(established.map(({ s }) => `${s.localPort}>${s.remotePort}`));
  const outside = established.find(({ s }) => !ends.has(`${s.remotePort}>${s.localPort}`));
  if (outside && !tcpAllowed)
    throw new GpuckptError('CRIU_CANNOT', `${who(outside.p)} holds ${describeInet(outside.s)} to a process outside the job: pass --criu-opt=--tcp-established to carry it (its peer must still be there at restore) or --criu-opt=--tcp-close to drop it`);
  if (established.length && !outside && !tcpAllowed) {
    plan.criuArgs.push('--tcp-established', '--network-lock', 'skip');
    plan.restoreArgs.push('--tcp-established');
    plan.notes.push(`${established.length / 2} TCP connection(s) between the job's processes carried whole`);
  }

  checkOutsideEnds(tree, files, inTree, socketInodes, unixSockets, unixAllowed, plan);

  if (biggestDeleted >= CRIU_DEFAULT_GHOST_LIMIT && !hasOption(criuOpts, '--ghost-limit')) {
    plan.criuArgs.push('--ghost-limit', String(biggestDeleted + 1));
    plan.notes.push(`files deleted while open are carried in the image (the largest ${formatBytes(biggestDeleted)})`);
  }
  if (plan.shellJob) plan.criuArgs.push('--shell-job');
  return plan;
}

function usesGpuOutside(p: TreeProcess, dev: string): string {
  return NVIDIA_DEVICE.test(dev)
    ? `${who(p)} uses the GPU (${dev}) without gpuckpt: it was started without the shim (LD_PRELOAD removed?) or forked from a CUDA process by an older gpuckpt; start the job again under gpuckpt run`
    : `${who(p)} uses the GPU device ${dev}, which gpuckpt does not carry and CRIU cannot save`;
}

/**
 * Pipes and Unix sockets with an end outside the tree. On the first
 * process's standard streams they are fine: the restore gives them the
 * restoring command's streams. Elsewhere a pipe is restored with nobody at
 * its other end (noted: often an fd leaked from a parent that nothing
 * uses), and a socket is refused, naming the process at its other end:
 * CRIU cannot dump it.
 */
function checkOutsideEnds(
  tree: TreeProcess[],
  files: Map<number, OpenFile[]>,
  inTree: Set<number>,
  socketInodes: Set<number>,
  unixSockets: () => Map<number, UnixSocketInfo>,
  unixAllowed: boolean,
  plan: DumpPlan,
): void {
  // Pipe ends by inode: which ends the tree holds.
  const pipeEnds = new Map<number, { read: boolean; write: boolean }>();
  for (const fs of files.values())
    for (const f of fs) {
      const ino = inodeOf(f.target, 'pipe');
      if (ino === undefined) continue;
      const e = pipeEnds.get(ino) ?? { read: false, write: false };
      if (isWriteOnly(f.flags)) e.write = true;
      else e.read = true;
      pipeEnds.set(ino, e);
    }
  const rootFiles = files.get(tree[0]!.pid)!;
  const stdioOf = (target: string) => rootFiles.find((f) => f.fd <= 2 && f.target === target)?.fd as 0 | 1 | 2 | undefined;

  // Candidates: a pipe with one end in the tree, a Unix socket whose peer the tree does not hold.
  const open = new Map<string, { p: TreeProcess; f: OpenFile }>();
  for (const p of tree)
    for (const f of files.get(p.pid)!) {
      const pipe = inodeOf(f.target, 'pipe');
      const sock = inodeOf(f.target, 'socket');
      if (pipe !== undefined) {
        const e = pipeEnds.get(pipe)!;
        if (!(e.read && e.write) && !open.has(f.target)) open.set(f.target, { p, f });
      } else if (sock !== undefined) {
        // Connected with no peer inode: a connection its server (outside) has not accepted yet.
        const s = unixSockets().get(sock);
        const outside = s && (s.peer ? !socketInodes.has(s.peer) : s.state === UNIX_CONNECTED);
        if (outside && !open.has(f.target)) open.set(f.target, { p, f });
      }
    }
  if (!open.size) return;
  const peerTargets = new Map<string, string>(); // our end -> what the outside holds
  for (const target of open.keys()) {
    const sock = inodeOf(target, 'socket');
    peerTargets.set(target, sock === undefined ? target : `socket:[${unixSockets().get(sock)!.peer || 'unaccepted'}]`);
  }
  const holders = holdersOf(new Set(peerTargets.values()), inTree);
  for (const [target, { p, f }] of open) {
    const outside = holders.get(peerTargets.get(target)!) ?? [];
    const isSocket = target.startsWith('socket:');
    if (!outside.length && !isSocket) continue; // nobody at the other end: restored as it is
    const fd = stdioOf(target);
    if (fd !== undefined) {
      plan.externalStdio.push({ fd, resource: target });
      if (isSocket) plan.criuArgs.push('--external', `unix[${inodeOf(target, 'socket')}]`);
      continue;
    }
    const peer = outside[0] ? who(outside[0]) : 'a process outside the job';
    if (!isSocket) {
      // CRIU carries the pipe; what the job writes to it or reads from it then goes nowhere.
      plan.notes.push(`${who(p)} fd ${f.fd} is a pipe to ${peer}, outside the job: restored with nobody at its other end`);
      continue;
    }
    if (unixAllowed) continue;
    throw new GpuckptError(
      'CRIU_CANNOT',
      `${who(p)} fd ${f.fd} is a Unix socket connected to ${peer}, outside the job: CRIU cannot restore that connection; close it before the checkpoint, or checkpoint a parent whose tree holds both ends (--criu-opt=--ext-unix-sk carries a datagram socket bound to a name)`,
    );
  }
  if (plan.externalStdio.length)
    plan.notes.push(`standard ${plan.externalStdio.map((s) => ['input', 'output', 'error'][s.fd]).join(', ')} lead outside the job: the restore connects them to its own`);
}
