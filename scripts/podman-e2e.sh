#!/usr/bin/env bash
# Podman end to end, on the CPU with the fake driver: a container whose
# process runs under gpuckpt is checkpointed and restored by
# `podman container checkpoint` / `restore` (runc), whose CRIU finds the
# gpuckpt plugin through /etc/criu/runc.conf, as README says. Checks that
# the restored process has its pool back, bit for bit, and that gpuckpt ps
# lists it by the PID the host gives it.
#
# Needs root, podman, runc, CRIU 4.0 or newer (CRIU=path, else criu on
# PATH) and `make test-build`. Puts /etc/criu/runc.conf back as it found
# it. Prints one line per step; exits non-zero at the first that fails.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
APP=$ROOT/build/test/pool_app_linked
FAKE=$ROOT/build/test/fake
CRIU=${CRIU:-$(command -v criu || true)}
say() { printf '%s\n' "$*"; }
fail() {
    say "FAIL $*"
    exit 1
}

[ "$(id -u)" = 0 ] || fail "needs root (runc checkpoints as root)"
for t in podman runc; do command -v $t >/dev/null || fail "$t not found"; done
[ -x "$CRIU" ] || fail "CRIU not found (set CRIU=path)"
major=$("$CRIU" --version | sed -n 's/^Version: \([0-9]*\).*/\1/p')
[ "${major:-0}" -ge 4 ] || fail "CRIU $("$CRIU" --version | head -n1) has no device hooks (4.0 or newer)"
[ -x "$APP" ] && [ -f "$ROOT/build/criu/gpuckpt_criu.so" ] || fail "not built (make && make test-build)"

T=$(mktemp -d /tmp/gpuckpt-podman-XXXX)
NAME=gpuckpt-e2e-$$
CONF=/etc/criu/runc.conf
PODMAN=(podman)
# Without systemd (a VM's init, a container), podman must manage cgroups itself.
[ "$(cat /proc/1/comm)" = systemd ] || PODMAN+=(--cgroup-manager=cgroupfs)
holder=
cleanup() {
    "${PODMAN[@]}" rm -f "$NAME" >/dev/null 2>&1 || true
    [ -n "$holder" ] && kill "$holder" 2>/dev/null || true
    mountpoint -q "$T/rootfs" && umount "$T/rootfs"
    if [ -f "$T/runc.conf.saved" ]; then cp "$T/runc.conf.saved" "$CONF"; else rm -f "$CONF"; fi
    rm -rf "$T"
}
trap cleanup EXIT

# The plugin as a package lays it out (PKG/build/criu/, PKG/bin/gpuckpt),
# that gpuckpt the fake driver's: runc hands CRIU no environment of ours.
mkdir -p "$T/pkg/build/criu" "$T/pkg/bin" "$T/driver" "$T/bin" /etc/criu
cp "$ROOT/build/criu/gpuckpt_criu.so" "$T/pkg/build/criu/"
cat >"$T/pkg/bin/gpuckpt" <<EOF
#!/bin/sh
LD_LIBRARY_PATH=$FAKE FAKE_CUDA_CKPT_DIR=$T/driver exec $ROOT/bin/gpuckpt "\$@"
EOF
chmod +x "$T/pkg/bin/gpuckpt"
ln -s "$CRIU" "$T/bin/criu"
[ -f "$CONF" ] && cp "$CONF" "$T/runc.conf.saved"
printf 'libdir %s\ntimeout 120\n' "$T/pkg/build/criu" >"$CONF"
say "ok setup: $CONF names $T/pkg/build/criu; $("$CRIU" --version | head -n1); $(podman --version); runc $(runc --version | sed -n 's/^runc version //p')"

# The host's tree as the container's root (bound without its submounts,
# which runc mounts afresh): the app, the fake driver and the FIFO its
# commands come through are at the same paths inside.
mkdir "$T/rootfs"
mount --bind / "$T/rootfs"
mkfifo "$T/in"
sleep 100000 >"$T/in" &
holder=$!
# Podman raises nofile and nproc; without CAP_SYS_RESOURCE that fails: lower them.
PATH=$T/bin:$PATH "${PODMAN[@]}" run -d --runtime runc --name "$NAME" --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 \
    -e LD_LIBRARY_PATH="$FAKE" -e FAKE_CUDA_CKPT_DIR="$T/driver" \
    --rootfs "$T/rootfs" /bin/sh -c "exec $ROOT/bin/gpuckpt run -- $APP <$T/in >$T/out 2>$T/err" >/dev/null
exec 3>"$T/in"
reply() { # the app's answer to $1 (nothing when none came within 10 s)
    local n
    n=$(wc -l <"$T/out" 2>/dev/null || echo 0)
    echo "$1" >&3
    for _ in $(seq 1 200); do
        [ "$(wc -l <"$T/out" 2>/dev/null || echo 0)" -gt "$n" ] && break
        sleep 0.05
    done
    tail -n +"$((n + 1))" "$T/out" | head -n1
}
checksums() { grep -o '"checksum":"[0-9a-f]*"' | tr '\n' ' '; }
# The pool state gpuckpt ps gives process $1 (nothing when it does not list it).
pool_state() { "$T/pkg/bin/gpuckpt" ps --json | node -e 'let s="";process.stdin.on("data",(d)=>(s+=d)).on("end",()=>{const r=JSON.parse(s).find((p)=>p.pid===Number(process.argv[1]));process.stdout.write(r?r.poolState:"")})' "$1"; }
for _ in $(seq 1 200); do grep -q '"ready"' "$T/out" 2>/dev/null && break; sleep 0.05; done
grep -q '"ready"' "$T/out" || fail "the container's app did not start: $(cat "$T/err" 2>/dev/null)"
M=$(reply mutate | checksums)
[ -n "$M" ] || fail "the container's app did not answer"
host=$("${PODMAN[@]}" inspect "$NAME" --format '{{.State.Pid}}')
[ "$(pool_state "$host")" = active ] || fail "gpuckpt ps does not list the container's process $host as active"
say "ok run: container $NAME, its process $host here (1 inside) under gpuckpt, listed by gpuckpt ps; pool mutated"

# --leave-running: the plugin's helper resumes the process once CRIU has let it go.
PATH=$T/bin:$PATH "${PODMAN[@]}" container checkpoint --leave-running "$NAME" >/dev/null || fail "podman container checkpoint --leave-running"
for _ in $(seq 1 100); do [ "$(pool_state "$host")" = active ] && break; sleep 0.1; done
[ "$(pool_state "$host")" = active ] || fail "after checkpoint --leave-running process $host is $(pool_state "$host"), not active"
[ "$(reply state | checksums)" = "$M" ] || fail "after checkpoint --leave-running the pool differs"
say "ok checkpoint --leave-running: the container runs on, its process $host active with its pool"

s=$(date +%s.%N)
PATH=$T/bin:$PATH "${PODMAN[@]}" container checkpoint --keep "$NAME" >/dev/null || fail "podman container checkpoint"
e=$(date +%s.%N)
dir=$("${PODMAN[@]}" inspect "$NAME" --format '{{.StaticDir}}')/checkpoint
[ -f "$dir/gpuckpt-pool-1/manifest" ] || fail "no pool image among CRIU's files ($(ls "$dir" | tr '\n' ' '))"
say "ok checkpoint: podman container checkpoint in $(echo "$e - $s" | awk '{printf "%.2f", $1 - $3}') s; the pool image at checkpoint/gpuckpt-pool-1"

s=$(date +%s.%N)
PATH=$T/bin:$PATH "${PODMAN[@]}" container restore --keep "$NAME" >/dev/null || fail "podman container restore"
e=$(date +%s.%N)
back=$("${PODMAN[@]}" inspect "$NAME" --format '{{.State.Pid}}')
[ "$(reply state | checksums)" = "$M" ] || fail "the restored process's pool differs from the checkpointed one"
[ "$(pool_state "$back")" = active ] || fail "gpuckpt ps does not list process $back as active"
say "ok restore: podman container restore in $(echo "$e - $s" | awk '{printf "%.2f", $1 - $3}') s; process $back here (1 inside) runs on its pool, bit for bit"
