#!/bin/bash
# What a CRIU per rank would give a distributed job's checkpoint (issue 25:
# one CRIU dumps the launcher, then each rank, one after another). The
# 2-rank DDP job of the GPU tests runs under gpuckpt run and is suspended
# (its GPUs free, each rank's driver state and pool in its host memory),
# then dumped with --leave-running, ROUNDS times each way:
#   tree: the launcher's tree by one CRIU, as a checkpoint does today;
#   apart: each rank by a CRIU of its own, both at once;
#   serial: each rank by a CRIU of its own, one after the other;
# and the tree's dump into the work directory, /dev/shm and a tmpfs of
# huge pages, to see whether where CRIU writes bounds it.
# Then it is resumed and must train on. Prints each CRIU's time and pages.
# Needs torchrun, criu, 2 GPUs and a built gpuckpt (root).
#   bash test/gpu/probes/criu_rank_dumps.sh [ROUNDS] [GIB] [WORK_DIR]
rounds=${1:-3} gib=${2:-4} work=${3:-/var/tmp/criu-rank-dumps}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
rm -rf "$work" && mkdir -p "$work/out"
now() { date +%s.%N; }
since() { awk "BEGIN {printf \"%.3f\", $(now) - $1}"; }
pages() { du -cm "$1"/pages-*.img 2>/dev/null | tail -1 | cut -f1; }
# CRIU's first real error: its RLIMIT_NOFILE complaint is survived, no cause.
why() { grep 'Error (' "$1/dump.log" | grep -v -m1 RLIMIT_NOFILE; }
# As gpuckpt dumps a job: its TCP connections whole, no network lock, and
# CRIU before 4.2 given the answer Linux 6.16 refuses (criu_compat.c).
opts=(--shell-job --tcp-established --network-lock skip -o dump.log)
compat="$root/build/gpuckpt-criu-compat.so"
criu() { LD_PRELOAD="$([ -f "$compat" ] && echo "$compat")" command criu "$@"; }

DDP_OUT="$work/out" DDP_STEPS=100000 DDP_STEP_SLEEP=0.05 DDP_BUFFER_GIB="$gib" \
  "$root/bin/gpuckpt" run -- torchrun --standalone --nproc_per_node=2 "$root/test/gpu/apps/ddp_train.py" >"$work/job.log" 2>&1 &
job=$!
# Ended however the probe ends (timeout's SIGTERM included).
trap 'kill $job 2>/dev/null' EXIT
trap 'exit 1' TERM INT
until [ "$(cat "$work/out"/rank*.txt 2>/dev/null | wc -l)" -ge 10 ]; do
  kill -0 $job 2>/dev/null || { echo "# the job did not start: $(tail -3 "$work/job.log")"; exit 1; }
  sleep 0.5
done
# The ranks: the launcher's children that map the shim.
ranks=()
for c in $(cat /proc/$job/task/*/children); do grep -q libgpuckpt /proc/$c/maps 2>/dev/null && ranks+=("$c"); done
echo "# launcher $job, ranks ${ranks[*]}"
# A job's pools stay in host memory (a suspend takes no --to for a job), so
# each rank's dump holds its staging too, which a checkpoint hands off
# before CRIU: more bytes than a checkpoint's dump, the same question.
"$root/bin/gpuckpt" suspend "$job" >"$work/suspend.log" 2>&1 || { echo "# suspend failed: $(tail -1 "$work/suspend.log")"; kill $job; exit 1; }
# Where the tree's dump writes: the work directory's disk, /dev/shm, or a
# tmpfs of huge pages (is CRIU's dump bound by the page insertion there?).
huge=/dev/shm/criu-rank-dumps-huge
mkdir -p "$huge" && mount -t tmpfs -o huge=always,size=$(( (2 * gib + 8) ))G none "$huge" || huge=
for ((r = 1; r <= rounds; r++)); do
  for d in "$work/tree" /dev/shm/criu-rank-dumps-tree ${huge:+"$huge/tree"}; do
    mkdir -p "$d" && t=$(now)
    if ! criu dump -t $job -D "$d" --leave-running "${opts[@]}"; then
      echo "# tree dump into $d failed: $(why "$d")"
      break 2
    fi
    echo "round $r tree into $(df --output=fstype "$d" | tail -1) $d: $(since "$t") s, $(pages "$d") MiB"
    rm -rf "$d"
  done
  t=$(now)
  for k in "${ranks[@]}"; do
    (d="$work/apart-$k" && mkdir -p "$d" && s=$(now) &&
      criu dump -t $k -D "$d" --leave-running "${opts[@]}" || echo "# dump of $k failed: $(why "$d")"
      echo "round $r apart $k: $(since "$s") s, $(pages "$d") MiB") &
  done
  wait
  echo "round $r apart: $(since "$t") s for both"
  rm -rf "$work"/apart-*
  t=$(now)
  for k in "${ranks[@]}"; do
    d="$work/serial-$k" && mkdir -p "$d" && s=$(now)
    criu dump -t $k -D "$d" --leave-running "${opts[@]}" || echo "# dump of $k failed: $(why "$d")"
    echo "round $r serial $k: $(since "$s") s"
    rm -rf "$d"
  done
  echo "round $r serial: $(since "$t") s for both"
done
"$root/bin/gpuckpt" resume "$job" >"$work/resume.log" 2>&1 || echo "# resume failed: $(tail -1 "$work/resume.log")"
before=$(cat "$work/out"/rank*.txt | wc -l)
sleep 3
after=$(cat "$work/out"/rank*.txt | wc -l)
echo "# after the resume: $((after - before)) more steps written by the ranks in 3 s"
kill $job 2>/dev/null
wait $job 2>/dev/null
[ -n "$huge" ] && umount "$huge"
rm -rf "$work" /dev/shm/criu-rank-dumps-*
