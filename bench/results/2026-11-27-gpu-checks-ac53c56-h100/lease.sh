#!/usr/bin/env bash
# Lease: the GPU checks on the session's last build (one wait policy in
# RequestState::Wait, the engine's single resolution), on every GPU of the
# host: device kernels, the NCCL transport's tests, loopback on device
# buffers, the overlap example, conformance with a process per GPU on 2
# and on all. One archive back.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out"
work=/tmp/lease; rm -rf "$work"; mkdir -p "$work"
source "$here/gpu_env.sh"
start=$SECONDS
{ nvidia-smi -L; lscpu | grep -E "Model name"; } > "$work/host.txt" 2>&1; cat "$work/host.txt"
timeout 400 "$here/run_checks.sh" "$work/checks" > "$work/checks.log" 2>&1
echo "checks rc=$? ($((SECONDS-start)) s)"; grep -E "PASS|FAIL|failed" "$work/checks.log" | tail -12
tar czf "$out/lease.tgz" -C "$work" .
echo "== done ($((SECONDS-start)) s)"
