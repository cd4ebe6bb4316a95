#!/bin/bash
# Whether CRIU can pre-dump a running CUDA process (the lever left for a
# job's checkpoint: the dump in the pause would then write only the pages
# changed since), and what the dump in the pause writes after one.
# A PyTorch process under `gpuckpt run` holds GIB GiB on the GPU and 0.5 GiB
# of host memory set up once, and rewrites 16 MiB of its host memory a step:
#   1. criu check --feature mem_dirty_track (soft-dirty pages, needed);
#   2. criu pre-dump --track-mem while it runs, plain; its first error;
#   3. when that worked: gpuckpt checkpoint with --prev-images-dir, against
#      a plain gpuckpt checkpoint of a second such process; CRIU's pages and
#      dump times of each.
# Needs criu and a built gpuckpt (root, a GPU).
#   bash test/gpu/probes/criu_predump.sh [GIB] [WORK_DIR]
gib=${1:-2} work=${2:-/tmp/criu-predump}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
rm -rf "$work" && mkdir -p "$work"
echo "# $(criu check --feature mem_dirty_track 2>&1 | tail -1)"

start() { # $1: its name; prints its PID once it runs
  setsid "$root/bin/gpuckpt" run -- python3 -c "
import time, torch
x = torch.ones(int($gib * (1 << 28)), device='cuda')
host = bytearray(b'\x01') * (512 << 20)
for i in range(0, len(host), 4096): host[i] = i % 251 or 1
print('ready', flush=True)
step = 0
while True:
    x.add_(1)
    torch.cuda.synchronize()
    at = (step * (16 << 20)) % len(host)
    host[at:at + (16 << 20)] = bytes([step % 251 or 1]) * (16 << 20)
    step += 1
    time.sleep(0.05)" >"$work/$1.out" 2>&1 &
  until grep -q ready "$work/$1.out" 2>/dev/null; do
    kill -0 $! 2>/dev/null || { echo "# $1 did not start: $(tail -2 "$work/$1.out")" >&2; return 1; }
    sleep 0.2
  done
  # The CUDA process: gpuckpt run execs it, so the PID is the one started.
  echo $!
}

pages() { # CRIU's pages in an images directory, MiB
  du -cm "$1"/pages-*.img* 2>/dev/null | tail -1 | cut -f1
}

a=$(start predumped) || exit 1
mkdir -p "$work/pre"
t0=$(date +%s.%N)
if criu pre-dump -t "$a" -D "$work/pre" --track-mem --shell-job -o pre-dump.log; then
  echo "# pre-dump of $a: ok in $(awk "BEGIN {printf \"%.3f\", $(date +%s.%N) - $t0}") s, $(pages "$work/pre") MiB of pages"
else
  echo "# pre-dump of $a failed: $(grep -m1 'Error (' "$work/pre/pre-dump.log")"
  kill "$a"
  exit 0
fi
sleep 2 # a few steps: some host memory rewritten since
b=$(start plain) || { kill "$a"; exit 1; }
for who in "$a:--criu-opt=--prev-images-dir=$work/pre --criu-opt=--track-mem" "$b:"; do
  pid=${who%%:*} opts=${who#*:}
  # shellcheck disable=SC2086
  GPUCKPT_LOG=debug "$root/bin/gpuckpt" checkpoint "$pid" -o "$work/img-$pid" $opts --json >"$work/ckpt-$pid.json" 2>"$work/ckpt-$pid.log"
  rc=$?
  echo "# checkpoint of $pid${opts:+ after the pre-dump}: rc $rc, $(node -e '
const s = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
console.log(`dump ${s.dumpSeconds} s, all ${s.seconds} s, CRIU pages ${(s.criuPages?.rawBytes / 2 ** 20).toFixed(0)} MiB raw`);' "$work/ckpt-$pid.json" 2>/dev/null || tail -1 "$work/ckpt-$pid.log")"
  grep -m1 'Error (' "$work/img-$pid/criu/dump.log" 2>/dev/null | sed 's/^/#   /'
done
kill "$a" "$b" 2>/dev/null
rm -rf "$work"
