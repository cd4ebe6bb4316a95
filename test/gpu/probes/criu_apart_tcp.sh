#!/bin/bash
# Whether a TCP connection between a parent and its child survives their
# being dumped apart and restored parent first, as a CRIU per rank would
# do to torchrun's agent and its ranks (docs/ARCHITECTURE.md, "Distributed
# jobs"). No GPU: a Python parent serves an echo over TCP to the child it
# started, and the child writes each answer to its log.
#   tree:  one CRIU dumps the parent's tree, one restores it (as today);
#   apart: the child dumped by a CRIU of its own, reaped by its parent,
#          the parent dumped; the parent restored, GAP seconds, the child.
# Prints, for each, what the child and the parent logged after the restore.
# Needs criu and root.   bash test/gpu/probes/criu_apart_tcp.sh [GAP]
gap=${1:-0.5}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
base=$(mktemp -d /dev/shm/criu-apart-tcp.XXXXXX)
compat="$root/build/gpuckpt-criu-compat.so"
criu() { LD_PRELOAD="$([ -f "$compat" ] && echo "$compat")" command criu "$@"; }
# As gpuckpt dumps a job: TCP connections whole, no network lock. The
# parent leads its session; the child alone needs --shell-job.
opts=(--tcp-established --network-lock skip -v2)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$base"' EXIT

cat >"$base/child.py" <<'EOF'
import socket, sys, time
port, log = int(sys.argv[1]), open(sys.argv[2], 'a', buffering=1)
s = socket.create_connection(('127.0.0.1', port))
f = s.makefile('rb')
k = 0
while True:
    k += 1
    try:
        s.sendall(b'%d\n' % k)
        a = f.readline()
    except OSError as e:
        log.write(f'error at {k}: {e!r}\n')
        sys.exit(1)
    if a != b'ack %d\n' % k:
        log.write(f'bad answer at {k}: {a!r}\n')
        sys.exit(1)
    log.write(f'ack {k} {time.time():.3f}\n')
    time.sleep(0.05)
EOF
cat >"$base/parent.py" <<'EOF'
import os, socket, subprocess, sys, threading, time
work = sys.argv[1]
os.setsid()
log = open(work + '/parent.log', 'a', buffering=1)
srv = socket.socket()
srv.bind(('127.0.0.1', 0))
srv.listen(1)
port = srv.getsockname()[1]
child = subprocess.Popen([sys.executable, os.path.dirname(work) + '/child.py', str(port), work + '/child.log'], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
c, _ = srv.accept()
def echo():
    f = c.makefile('rb')
    try:
        for line in f:
            c.sendall(b'ack ' + line)
        log.write('echo: the child closed\n')
    except OSError as e:
        log.write(f'echo: {e!r}\n')
threading.Thread(target=echo, daemon=True).start()
open(work + '/ids', 'w').write(f'{child.pid} {port}\n')
while not os.path.exists(work + '/reap'):
    time.sleep(0.05)
os.waitpid(child.pid, 0)  # as the agent's shim would, before its own dump
open(work + '/reaped', 'w').close()
while True:
    time.sleep(1)
EOF

now() { date +%s.%N; }
# Established TCP sockets on PORT (either end), from /proc/net/tcp.
established() { awk -v p=$(printf '%04X' "$1") '$4 == "01" && ($2 ~ ":"p"$" || $3 ~ ":"p"$")' /proc/net/tcp | wc -l; }
acks() { grep -c '^ack' "$1/child.log" 2>/dev/null; }
why() { grep 'Error (' "$1" | grep -v -m1 RLIMIT_NOFILE; }
# The dumped processes' PIDs, free for their restore: the parent reaped
# here, the child, orphaned when CRIU ends the tree, by init (which on the
# GPU hosts reaps up to a second late).
pids_free() { # PID...
  wait "$@" 2>/dev/null
  local p
  for p in "$@"; do while [ -e /proc/$p ]; do sleep 0.05; done; done
}

start() { # WORK
  mkdir -p "$1"
  python3 "$base/parent.py" "$1" </dev/null >"$1/parent.out" 2>&1 &
  parent=$!
  pids+=($parent)
  until [ "$(acks "$1")" -ge 10 ] 2>/dev/null; do
    kill -0 $parent 2>/dev/null || { echo "# the parent did not start: $(tail -2 "$1/parent.out")"; return 1; }
    sleep 0.1
  done
  read -r child port <"$1/ids"
  pids+=($child)
}

# After the restore: whether the child goes on answering.
report() { # NAME WORK
  local before=$(acks "$2")
  sleep 1.5
  echo "$1: $(($(acks "$2") - before)) answers in 1.5 s after the restore; established sockets on the port: $(established "$port"); child's last line: $(tail -1 "$2/child.log"); parent: $(tail -1 "$2/parent.log" 2>/dev/null || echo nothing)"
}

w="$base/tree"
start "$w" || exit 1
criu dump -t $parent -D "$w" -o dump.log "${opts[@]}" || echo "# tree dump failed: $(why "$w/dump.log")"
pids_free $parent $child
t=$(now)
criu restore -D "$w" -o restore.log --restore-detached "${opts[@]}" || echo "# tree restore failed: $(why "$w/restore.log")"
echo "tree: restored in $(awk "BEGIN {printf \"%.3f\", $(now) - $t}") s"
report tree "$w"
kill $parent $child 2>/dev/null

w="$base/apart"
start "$w" || exit 1
mkdir -p "$w/child-img" "$w/parent-img"
criu dump -t $child -D "$w/child-img" -o dump.log --shell-job "${opts[@]}" || echo "# child dump failed: $(why "$w/child-img/dump.log")"
touch "$w/reap"
until [ -e "$w/reaped" ]; do sleep 0.05; done
criu dump -t $parent -D "$w/parent-img" -o dump.log "${opts[@]}" || echo "# parent dump failed: $(why "$w/parent-img/dump.log")"
pids_free $parent $child
echo "apart: both dumped; established sockets on the port: $(established "$port")"
criu restore -D "$w/parent-img" -o restore.log --restore-detached "${opts[@]}" || echo "# parent restore failed: $(why "$w/parent-img/restore.log")"
sleep "$gap"
echo "apart: parent restored, $gap s later: established sockets on the port: $(established "$port"); parent: $(tail -1 "$w/parent.log" 2>/dev/null || echo nothing)"
criu restore -D "$w/child-img" -o restore.log --restore-detached --shell-job "${opts[@]}" || echo "# child restore failed: $(why "$w/child-img/restore.log")"
report apart "$w"
