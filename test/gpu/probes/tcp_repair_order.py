#!/usr/bin/env python3
"""Whether a loopback TCP connection survives its two ends being brought
back one after the other, as a CRIU per rank would bring back torchrun's
agent (the store's server end) before its ranks (docs/ARCHITECTURE.md,
"Distributed jobs"). No GPU, no CRIU: each end is saved and remade with
the kernel's repair mode, as CRIU does (TCP_REPAIR, its queues, sequence
numbers, options and window), then let out of repair in some order:

  together:       both remade, then both let out (one CRIU restoring both)
  server-first:   the server's end remade and let out, then the client's
                  (a launcher restored before its ranks, as CRIU would)
  server-held:    the server's end remade and held in repair until the
                  client's is remade and let out, then let out without a
                  window probe (gpuckpt restoring the launcher's ends itself);
                  again with a window probe, and with a message the server
                  had not read yet

For each, one line: whether a message then goes both ways, or the error.
Needs root (CAP_NET_ADMIN).   python3 test/gpu/probes/tcp_repair_order.py
"""
import socket
import struct
import time

TCP_REPAIR, TCP_REPAIR_QUEUE, TCP_QUEUE_SEQ, TCP_REPAIR_OPTIONS = 19, 20, 21, 22
TCP_REPAIR_WINDOW, TCP_TIMESTAMP = 29, 24
RECV_QUEUE, SEND_QUEUE = 1, 2
REPAIR_ON, REPAIR_OFF, REPAIR_OFF_NO_WP = 1, 0, -1
TCPOPT_MAXSEG, TCPOPT_WINDOW, TCPOPT_SACK_PERM, TCPOPT_TIMESTAMP = 2, 3, 4, 8
TCPI_OPT_TIMESTAMPS, TCPI_OPT_SACK, TCPI_OPT_WSCALE = 1, 2, 4


def pair():
    srv = socket.socket()
    srv.bind(('127.0.0.1', 0))
    srv.listen(1)
    client = socket.create_connection(srv.getsockname())
    server, _ = srv.accept()
    srv.close()
    client.sendall(b'hello\n')
    assert server.recv(16) == b'hello\n'
    server.sendall(b'welcome\n')
    assert client.recv(16) == b'welcome\n'
    return server, client


def save(s):
    """The end's state, as CRIU's dump takes it; the socket is closed in repair mode (silently)."""
    s.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR, REPAIR_ON)
    state = {'local': s.getsockname(), 'peer': s.getpeername()}
    for name, q in (('recv', RECV_QUEUE), ('send', SEND_QUEUE)):
        s.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_QUEUE, q)
        state[name + '_seq'] = struct.unpack('I', s.getsockopt(socket.IPPROTO_TCP, TCP_QUEUE_SEQ, 4))[0]
        try:
            state[name + '_data'] = s.recv(1 << 20, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            state[name + '_data'] = b''
    s.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_QUEUE, 0)
    info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    options, wscale = info[5], info[6]
    state['options'] = options
    state['snd_wscale'], state['rcv_wscale'] = wscale & 0xF, wscale >> 4
    state['mss'] = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
    state['window'] = s.getsockopt(socket.IPPROTO_TCP, TCP_REPAIR_WINDOW, 20)
    state['timestamp'] = s.getsockopt(socket.IPPROTO_TCP, TCP_TIMESTAMP)
    s.close()
    return state


def remake(state):
    """The end made again in repair mode, as CRIU's restore makes it; left in repair."""
    s = socket.socket()
    s.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR, REPAIR_ON)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    for name, q in (('recv', RECV_QUEUE), ('send', SEND_QUEUE)):
        # The queue's data goes in below and moves the sequence on by its length.
        s.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_QUEUE, q)
        s.setsockopt(socket.IPPROTO_TCP, TCP_QUEUE_SEQ, struct.pack('I', (state[name + '_seq'] - len(state[name + '_data'])) & 0xFFFFFFFF))
    s.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_QUEUE, 0)
    s.bind(state['local'])
    s.connect(state['peer'])
    opts = [(TCPOPT_MAXSEG, state['mss'])]
    if state['options'] & TCPI_OPT_WSCALE:
        opts.append((TCPOPT_WINDOW, state['snd_wscale'] | (state['rcv_wscale'] << 16)))
    if state['options'] & TCPI_OPT_SACK:
        opts.append((TCPOPT_SACK_PERM, 0))
    if state['options'] & TCPI_OPT_TIMESTAMPS:
        opts.append((TCPOPT_TIMESTAMP, 0))
    s.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_OPTIONS, b''.join(struct.pack('II', c, v) for c, v in opts))
    s.setsockopt(socket.IPPROTO_TCP, TCP_TIMESTAMP, struct.pack('I', state['timestamp'] & 0xFFFFFFFF))
    for name, q in (('send', SEND_QUEUE), ('recv', RECV_QUEUE)):
        if state[name + '_data']:
            s.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_QUEUE, q)
            s.send(state[name + '_data'])
    s.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_QUEUE, 0)
    # Last: the kernel checks the window against the queues' sequence numbers.
    s.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_WINDOW, state['window'])
    return s


def out_of_repair(s, how=REPAIR_OFF):
    s.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR, how)


def talks(server, client):
    try:
        for a, b, msg in ((client, server, b'ping\n'), (server, client, b'pong\n')):
            a.sendall(msg)
            b.settimeout(1)
            got = b.recv(16)
            if got != msg:
                return f'sent {msg!r}, received {got!r}'
        return 'a message went both ways'
    except OSError as e:
        return f'{type(e).__name__}: {e}'


def run(name, order, unread=b''):
    server, client = pair()
    if unread:  # sent by the client, not yet read by the server: in its receive queue
        client.sendall(unread)
        time.sleep(0.05)
    saved_server, saved_client = save(server), save(client)
    server, client = order(saved_server, saved_client)
    if unread:
        server.settimeout(1)
        got = server.recv(64)
        if got != unread:
            print(f'{name}: the unread {unread!r} came back as {got!r}')
            return
    print(f'{name}: {talks(server, client)}')
    server.close()
    client.close()


def together(saved_server, saved_client):
    server, client = remake(saved_server), remake(saved_client)
    out_of_repair(server)
    out_of_repair(client)
    return server, client


def server_first(saved_server, saved_client):
    server = remake(saved_server)
    out_of_repair(server)  # its window probe goes to a port nothing holds
    time.sleep(0.2)
    client = remake(saved_client)
    out_of_repair(client)
    return server, client


def server_held(saved_server, saved_client):
    server = remake(saved_server)
    time.sleep(0.2)
    client = remake(saved_client)
    out_of_repair(client)  # its window probe reaches the server's end, still in repair
    time.sleep(0.2)
    out_of_repair(server, REPAIR_OFF_NO_WP)
    return server, client


def server_held_probing(saved_server, saved_client):
    server = remake(saved_server)
    client = remake(saved_client)
    out_of_repair(client)
    out_of_repair(server)  # with its window probe, to a peer that is back
    return server, client


if __name__ == '__main__':
    run('together', together)
    run('server-first', server_first)
    run('server-held', server_held)
    run('server-held, let out with a window probe', server_held_probing)
    run('server-held, a message unread in the server', server_held, b'queued\n')
