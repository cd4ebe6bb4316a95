#!/bin/bash
# Where the driver's checkpoint puts its copy of a process's device state
# outside the pool, who allocates it, and how much of it is zero pages: a
# PyTorch job and a 2-rank torchrun DDP job, each suspended by gpuckpt
# (pool out, driver checkpoint) with mmap_callers.so logging its large
# allocations. Run from the repository root on a GPU host:
#   bash test/gpu/probes/driver_copy.sh
set -u
W=$(mktemp -d /tmp/driver-copy.XXXX)
gcc -O2 -shared -fPIC -o "$W/mc.so" test/gpu/probes/mmap_callers.c -ldl || exit 1
export GPUCKPT_RUN_DIR=$W/run MC=$W/mc.so
preload='LD_PRELOAD="$LD_PRELOAD $MC" exec'

summarise() { # LOG: the large allocations, by kind and library
  awk '{k=$4" by "$NF; n[k]++; b[k]+=$5} END {for (k in n) printf "    %5d x %-40s %8.1f MiB\n", n[k], k, b[k]/1048576}' "$1" | sort -k6 -nr | head -8
}

echo "== PyTorch job (166M parameters, 2 GiB buffer)"
mkfifo "$W/in"
MMAP_CALLERS_LOG=$W/torch.log TORCH_PARAMS_M=166 TORCH_BUFFER_GIB=2 \
  bin/gpuckpt run -- sh -c "$preload python3 test/gpu/apps/torch_train.py" < "$W/in" > "$W/out" 2>&1 &
pid=$!
exec 3> "$W/in"
until grep -q ready "$W/out"; do sleep 0.2; kill -0 $pid || { cat "$W/out"; exit 1; }; done
echo "train 3" >&3
until grep -q trained "$W/out"; do sleep 0.2; done
node test/gpu/probes/new_anon.mjs snap $pid "$W/before.json"
: > "$W/torch.log"
bin/gpuckpt suspend $pid
node test/gpu/probes/new_anon.mjs diff $pid "$W/before.json"
summarise "$W/torch.log"
bin/gpuckpt resume $pid
echo "train 1" >&3
echo quit >&3
exec 3>&-
wait $pid
echo "exit $?; last: $(tail -1 "$W/out")"

echo "== torchrun, 2 ranks (DDP, 4 GiB buffers)"
mkdir -p "$W/ddp"
MMAP_CALLERS_LOG=$W/ddp.log DDP_OUT=$W/ddp DDP_STEPS=100000 DDP_STEP_SLEEP=0.05 DDP_BUFFER_GIB=4 \
  bin/gpuckpt run -- sh -c "$preload torchrun --standalone --nproc_per_node=2 test/gpu/apps/ddp_train.py" > "$W/ddp.out" 2>&1 &
job=$!
until [ "$(cat "$W/ddp/rank1.txt" 2>/dev/null | wc -l)" -ge 5 ]; do sleep 0.5; kill -0 $job || { tail "$W/ddp.out"; exit 1; }; done
ranks=$(pgrep -P $job)
for r in $job $ranks; do node test/gpu/probes/new_anon.mjs snap $r "$W/b$r.json"; done
: > "$W/ddp.log"
bin/gpuckpt suspend $job
for r in $job $ranks; do node test/gpu/probes/new_anon.mjs diff $r "$W/b$r.json"; done
summarise "$W/ddp.log"
bin/gpuckpt resume $job
sleep 1
kill -TERM $job
wait $job
echo "job ended: $?"
rm -rf "$W"
