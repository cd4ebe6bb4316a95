#!/bin/bash
# Which GPUs hold a contexts of each process of a 2-rank DDP job
# (test/gpu/apps/ddp_train.py, nvidia-smi), and when a rank gains one on a
# GPU not its own: plain torchrun (once per NCCL setting given, e.g.
# NCCL_P2P_DISABLE=1), then under gpuckpt run, before and after each verb.
# Run on a 2-GPU host after `source .device/setup.sh .device`:
#   bash test/gpu/probes/ddp_contexts.sh [VAR=VALUE ...]
set -u
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
SCRIPT=$ROOT/test/gpu/apps/ddp_train.py
W=$(mktemp -d /tmp/ddp-contexts-XXXXXX)
export DDP_STEPS=100000 DDP_STEP_SLEEP=0.05 DDP_BUFFER_GIB=1
contexts() {
  echo "# $1 (step $(steps "$2")):"
  nvidia-smi --query-compute-apps=pid,gpu_bus_id,used_memory --format=csv,noheader | sed 's/^/#   /'
}
steps() { cat "$1/rank0.txt" 2>/dev/null | wc -l; }
until_steps() {
  local n=$(($(steps "$1") + $2))
  for _ in $(seq 1200); do [ "$(steps "$1")" -ge $n ] && return 0; sleep 0.1; done
  echo "# no step $n in $1"; return 1
}
run_plain() {
  local d=$W/plain-$RANDOM; mkdir -p "$d"
  env "$@" DDP_OUT="$d" torchrun --standalone --nproc_per_node=2 "$SCRIPT" > "$d.log" 2>&1 & local p=$!
  until_steps "$d" 3 && contexts "plain torchrun $*" "$d"
  kill "$p"; wait "$p" 2>/dev/null
}
run_plain
for setting in "$@"; do run_plain "$setting"; done
d=$W/gpuckpt; mkdir -p "$d"
DDP_OUT=$d "$ROOT/bin/gpuckpt" run -- torchrun --standalone --nproc_per_node=2 "$SCRIPT" > "$d.log" 2>&1 & g=$!
until_steps "$d" 3 && contexts "under gpuckpt run" "$d"
"$ROOT/bin/gpuckpt" checkpoint $g --gpu-only -o "$W/image" > /dev/null && until_steps "$d" 2 && contexts "after checkpoint --gpu-only" "$d"
"$ROOT/bin/gpuckpt" suspend $g > /dev/null && contexts "suspended" "$d"
"$ROOT/bin/gpuckpt" resume $g > /dev/null && until_steps "$d" 2 && contexts "resumed" "$d"
kill $g; wait $g 2>/dev/null
rm -rf "$W"
