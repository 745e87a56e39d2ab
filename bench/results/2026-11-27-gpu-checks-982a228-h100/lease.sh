#!/usr/bin/env bash
# Lease (session 6, 4): the GPU checks on the session's last code (counts
# read by runtime/env_var.h in the NCCL transport and the engine). One
# archive back.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out"
work=/tmp/lease; rm -rf "$work"; mkdir -p "$work"
source "$here/gpu_env.sh"
export NCCL_NVLS_ENABLE=0
start=$SECONDS
{ nvidia-smi -L; lscpu | grep -E "Model name"; } > "$work/host.txt" 2>&1; cat "$work/host.txt"
timeout 300 "$here/run_checks.sh" "$work/checks" > "$work/checks.log" 2>&1
echo "checks rc=$? ($((SECONDS-start)) s)"; grep -E "PASS|FAIL|failed" "$work/checks.log" | tail -12
tar czf "$out/lease.tgz" -C "$work" .
echo "== done ($((SECONDS-start)) s)"
