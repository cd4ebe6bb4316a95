#!/bin/bash
# Whether CRIU dumps a process's pages faster into FIFOs that another
# process reads than into files: the lever for a job's dump, where each
# rank's pages take CRIU 0.52-0.61 s. CRIU 4.1 writes pages-N.img raw (no
# magic), by splice from its page pipe, looping until the whole length is
# written (criu/page-xfer.c write_pages_loc), so a FIFO at that name gets
# the process's pages as page references, and the reader copies them out
# once, instead of CRIU copying them into the page cache at ~2 GB/s.
# A process with GIB GiB of non-zero heap is dumped --leave-running RUNS
# times into a directory on DISK_DIR, alternately with plain files and
# with pages-1..8.img made FIFOs beforehand, each read by a reader that
# sets the pipe to 1 MiB and reads it in 4 MiB. Needs criu on PATH (root).
#   bash test/gpu/probes/criu_fifo_pages.sh [GIB] [RUNS] [DISK_DIR]
gib=${1:-1.2} runs=${2:-3} disk=${3:-/tmp}
out=$(mktemp /tmp/criu-fifo-target.XXXX)
setsid python3 -c "
import time
b = bytearray(b'\x01') * int($gib * (1 << 30))
for i in range(0, len(b), 4096): b[i] = i % 251 or 1
print('ready', flush=True)
time.sleep(600)" > "$out" 2>&1 &
pid=$!
until grep -q ready "$out"; do sleep 0.2; done

reader='
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)  # waits for a writer: CRIU, or the release below
try:
    fcntl.fcntl(fd, 1031, 1 << 20)  # F_SETPIPE_SZ
except OSError:
    pass
buf = memoryview(bytearray(4 << 20))
n = 0
while True:
    r = os.readv(fd, [buf])
    if not r:
        break
    n += r
print(n, time.time())'

secs() { awk "BEGIN {printf \"%.3f\", $2 - $1}"; }

for r in $(seq "$runs"); do
  d=$(mktemp -d "$disk/criu-probe.XXXX")
  t0=$(date +%s.%N)
  criu dump -t $pid -D "$d" --leave-running --shell-job -o dump.log || tail -3 "$d/dump.log"
  t1=$(date +%s.%N)
  echo "run $r, files: $(secs "$t0" "$t1") s, $(du -cm "$d"/pages-*.img | tail -1 | cut -f1) MiB of pages"
  rm -rf "$d"

  d=$(mktemp -d "$disk/criu-probe.XXXX")
  readers=()
  for n in 1 2 3 4 5 6 7 8; do
    mkfifo "$d/pages-$n.img"
    python3 -c "$reader" "$d/pages-$n.img" > "$d/read-$n" &
    readers+=($!)
  done
  sleep 1 # every reader up and waiting in open before the clock starts
  t0=$(date +%s.%N)
  criu dump -t $pid -D "$d" --leave-running --shell-job -o dump.log || tail -3 "$d/dump.log"
  t1=$(date +%s.%N)
  # A reader CRIU never wrote to still waits in open: a writer that opens
  # and closes at once gives it an end of file (where no reader is left,
  # the non-blocking open fails, and nothing waits).
  for n in 1 2 3 4 5 6 7 8; do
    python3 -c 'import os, sys; os.close(os.open(sys.argv[1], os.O_WRONLY | os.O_NONBLOCK))' "$d/pages-$n.img" 2>/dev/null
  done
  wait "${readers[@]}"
  # What CRIU wrote, and when its last reader had it all (from the readers' own clocks).
  read_mib=$(for n in 1 2 3 4 5 6 7 8; do read -r bytes _ < "$d/read-$n"; [ "${bytes:-0}" != 0 ] && echo "pages-$n.img $((bytes >> 20)) MiB"; done | paste -sd, -)
  t2=$(for n in 1 2 3 4 5 6 7 8; do read -r bytes at < "$d/read-$n"; [ "${bytes:-0}" != 0 ] && echo "$at"; done | sort -n | tail -1)
  echo "run $r, fifos: $(secs "$t0" "$t1") s, the last page read $(secs "$t1" "${t2:-$t1}") s after CRIU's end; read: ${read_mib:-nothing}; other pages files: $(cd "$d" && find . -maxdepth 1 -name 'pages-*.img' -type f | paste -sd, -)"
  grep -m1 'Error (' "$d/dump.log" | sed 's/^/#   /'
  rm -rf "$d"
done
kill $pid
rm -f "$out"
