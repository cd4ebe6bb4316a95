/** A process's TCP and UDP sockets, by inode, from /proc/PID/net (its network namespace's view). */
import { readFileSync } from 'node:fs';

export interface InetSocket {
  proto: 'tcp' | 'tcp6' | 'udp' | 'udp6';
  /** TCP states by their kernel names; UDP sockets are 'unconnected' or 'connected'. */
  state: 'listen' | 'established' | 'connected' | 'unconnected' | 'other';
  localPort: number;
  remotePort: number;
}

const TCP_ESTABLISHED = 0x01;
const TCP_LISTEN = 0x0a;

/** Inode to socket, for the network namespace pid lives in. */
export function inetSockets(pid: number): Map<number, InetSocket> {
  const out = new Map<number, InetSocket>();
  for (const proto of ['tcp', 'tcp6', 'udp', 'udp6'] as const) {
    let text: string;
    try {
      text = readFileSync(`/proc/${pid}/net/${proto}`, 'utf8');
    } catch {
      continue; // no IPv6, say
    }
    for (const line of text.split('\n').slice(1)) {
      // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
      const f = line.trim().split(/\s+/);
      if (f.length < 10) continue;
      const port = (addr: string) => parseInt(addr.split(':')[1] ?? '0', 16);
      const st = parseInt(f[3]!, 16);
      const tcp = proto.startsWith('tcp');
      const state = tcp ? (st === TCP_LISTEN ? 'listen' : st === TCP_ESTABLISHED ? 'established' : 'other') : port(f[2]!) ? 'connected' : 'unconnected';
      out.set(Number(f[9]), { proto, state, localPort: port(f[1]!), remotePort: port(f[2]!) });
    }
  }
  return out;
}

export function describeInet(s: InetSocket): string {
  const kind = s.proto.startsWith('tcp') ? 'TCP' : 'UDP';
  if (s.state === 'listen') return `a ${kind} socket listening on port ${s.localPort}`;
  if (s.state === 'established' || s.state === 'connected') return `a ${kind} connection from port ${s.localPort} to port ${s.remotePort}`;
  return `a ${kind} socket on port ${s.localPort}`;
}
