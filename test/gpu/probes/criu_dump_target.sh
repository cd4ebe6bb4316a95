#!/bin/bash
# How fast CRIU dumps a process's memory into a directory on the image's
# disk against one in /dev/shm: a process with GIB GiB of non-zero heap,
# dumped --leave-running RUNS times into each. Needs criu on PATH (root).
#   bash test/gpu/probes/criu_dump_target.sh [GIB] [RUNS] [DISK_DIR]
gib=${1:-1.2} runs=${2:-3} disk=${3:-/tmp}
setsid python3 -c "
import time
b = bytearray(b'\x01') * int($gib * (1 << 30))
for i in range(0, len(b), 4096): b[i] = i % 251 or 1
print('ready', flush=True)
time.sleep(600)" > /tmp/criu-target.out 2>&1 &
pid=$!
until grep -q ready /tmp/criu-target.out; do sleep 0.2; done
for r in $(seq "$runs"); do
  for where in "$disk" /dev/shm; do
    d=$(mktemp -d "$where/criu-probe.XXXX")
    t0=$(date +%s.%N)
    criu dump -t $pid -D "$d" --leave-running --shell-job -o dump.log || tail -3 "$d/dump.log"
    t1=$(date +%s.%N)
    echo "run $r into $where ($(df --output=fstype "$d" | tail -1)): $(awk "BEGIN {printf \"%.3f\", $t1 - $t0}") s, $(du -sm "$d" | cut -f1) MiB"
    rm -rf "$d"
  done
done
kill $pid
