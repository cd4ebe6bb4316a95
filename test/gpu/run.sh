#!/usr/bin/env bash
# GPU tests (npm run test:gpu): builds the test programs of test/gpu/apps with
# nvcc into build/gpu/, then runs test/gpu/run.mjs, which drives them under
# bin/gpuckpt. Needs an NVIDIA GPU, the CUDA toolkit (nvcc), node on PATH, and
# the shim and CLI already built (npm run build). Without a GPU it reports the
# suite as skipped, never as passed.
#
# Environment:
#   OUT            if set, everything printed also goes to $OUT/gpu-test.log
#                  ($OUT/gpu-bench.log for npm run bench, so a bench run after
#                  the tests in one session leaves their log whole)
#   NVCC           nvcc to use (default: nvcc on PATH, else $CUDA_HOME/bin/nvcc)
#   CUDA_HOME      toolkit root (default: from nvcc's location, else /usr/local/cuda)
#   GPU_GENCODE    nvcc -gencode value (default arch=compute_90,code=[sm_90,compute_90])
#   GPU_TEST_*     options of run.mjs (see there)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
B=build/gpu
APPS=test/gpu/apps

LOG=
if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    LOG="$OUT/gpu-$([ "${GPU_RUN_MODE:-}" = bench ] && echo bench || echo test).log"
    : >"$LOG"
fi
say() {
    printf '%s\n' "$*"
    if [ -n "$LOG" ]; then printf '%s\n' "$*" >>"$LOG"; fi
}

# ---- GPU present? -------------------------------------------------------
gpus=
if gpus=$(nvidia-smi -L 2>/dev/null) && grep -q '^GPU [0-9]' <<<"$gpus"; then
    :
else
    say "SKIP gpu: no NVIDIA GPU on this machine"
    say "0 passed, 0 failed, 1 skipped"
    exit 0
fi
say "# $(grep -c '^GPU [0-9]' <<<"$gpus") GPU(s): $(head -n1 <<<"$gpus")"

fail_build() {
    say "FAIL build: $*"
    say "0 passed, 1 failed, 0 skipped"
    exit 1
}

# ---- toolchain ----------------------------------------------------------
if [ -z "${NVCC:-}" ]; then
    if command -v nvcc >/dev/null 2>&1; then
        NVCC=$(command -v nvcc)
    else
        NVCC=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
    fi
fi
[ -x "$NVCC" ] || fail_build "nvcc not found (set NVCC or CUDA_HOME)"
CUDA_HOME=${CUDA_HOME:-$(cd "$(dirname "$NVCC")/.." && pwd)}
BIN2C=$CUDA_HOME/bin/bin2c
[ -x "$BIN2C" ] || BIN2C=$(dirname "$NVCC")/bin2c
[ -x "$BIN2C" ] || fail_build "bin2c not found beside nvcc"
command -v node >/dev/null 2>&1 || fail_build "node not on PATH (source the device setup.sh first)"

# libcuda to link driver_api against: the toolkit's stub, else the driver's.
LIBCUDA=(-lcuda)
for d in "$CUDA_HOME/lib64/stubs" "$CUDA_HOME/targets/x86_64-linux/lib/stubs"; do
    if [ -e "$d/libcuda.so" ]; then
        LIBCUDA=(-L"$d" -lcuda)
        break
    fi
done
if [ "${LIBCUDA[0]}" = -lcuda ] && ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so '; then
    LIBCUDA=(-l:libcuda.so.1)
fi

GENCODE=(-gencode "${GPU_GENCODE:-arch=compute_90,code=[sm_90,compute_90]}")
NVFLAGS=(-O2 -std=c++17 -lineinfo "${GENCODE[@]}" -I"$APPS" -Xcompiler -Wall,-pthread)

# ---- build (in parallel) ------------------------------------------------
mkdir -p "$B/log"
build_driver_api() {
    "$NVCC" -fatbin "${GENCODE[@]}" -I"$APPS" "$APPS/driver_kernels.cu" -o "$B/driver_kernels.fatbin" &&
        "$BIN2C" -c -st -t longlong -n gt_fatbin "$B/driver_kernels.fatbin" >"$B/driver_kernels_fatbin.h" &&
        "$NVCC" -O2 -cudart none -Xcompiler -Wall,-std=gnu11 -I"$APPS" -I"$B" "$APPS/driver_api.c" \
            -o "$B/driver_api" "${LIBCUDA[@]}"
}
build_one() { # name, then the command
    local name=$1
    shift
    if "$@" >"$B/log/$name.log" 2>&1; then
        echo ok >"$B/log/$name.status"
    else
        echo fail >"$B/log/$name.status"
    fi
}
t0=$SECONDS
declare -A pids=()
rm -f "$B"/log/*.status
build_one static_cudart "$NVCC" "${NVFLAGS[@]}" "$APPS/static_cudart.cu" -o "$B/static_cudart" &
pids[static_cudart]=$!
build_one shared_cudart "$NVCC" "${NVFLAGS[@]}" -cudart shared -Xlinker -rpath="$CUDA_HOME/lib64" \
    "$APPS/static_cudart.cu" -o "$B/shared_cudart" &
pids[shared_cudart]=$!
build_one driver_api build_driver_api &
pids[driver_api]=$!
build_one driver_ckpt "$NVCC" -O2 -cudart none -Xcompiler -Wall,-std=gnu11 "$APPS/driver_ckpt.c" -o "$B/driver_ckpt" -ldl &
pids[driver_ckpt]=$!
for app in threads two_gpu bench_alloc pool_fill; do
    build_one "$app" "$NVCC" "${NVFLAGS[@]}" "$APPS/$app.cu" -o "$B/$app" &
    pids[$app]=$!
done
failed=()
for name in "${!pids[@]}"; do
    wait "${pids[$name]}" || true
    if [ "$(cat "$B/log/$name.status" 2>/dev/null)" != ok ]; then
        failed+=("$name")
        say "# nvcc output for $name:"
        while IFS= read -r line; do say "#   $line"; done < <(tail -n 20 "$B/log/$name.log")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    fail_build "${failed[*]} (logs in $B/log/)"
fi
say "# built ${#pids[@]} programs into $B/ in $((SECONDS - t0)) s ($("$NVCC" --version | tail -n1))"

# ---- run ----------------------------------------------------------------
# The quick suite (the default) fits one 10-minute call: run.mjs gets what
# the build left of 560 s (its backstop adds at most 20 s). The long one
# (npm run test:gpu:long) names its own budget.
export GPU_TEST_BUDGET_S=${GPU_TEST_BUDGET_S:-$((560 - SECONDS))}
export GPU_TEST_BIN_DIR="$ROOT/$B"
export GPU_TEST_LOG_APPEND=1
exec node test/gpu/run.mjs
