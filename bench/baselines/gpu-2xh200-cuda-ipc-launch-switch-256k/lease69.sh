#!/usr/bin/env bash
# Lease 69 (2 H200s): run_checks.sh at 29525e3, a GPU per rank: the first
# 2-GPU check of findings 45-47 (no completion count, OperationOrder, the
# 256 KiB switch). Writes its summary straight into OUT as it goes.
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/gpu_env.sh"
out="$1"; mkdir -p "$out"
{ nvidia-smi -L; date -u; } > "$out/checks.txt"
CHECK_LIMIT=120 timeout 470 "$here/run_checks.sh" /tmp/checks >> "$out/checks.txt" 2>&1
echo "run_checks rc=$?" >> "$out/checks.txt"
tar czf "$out/logs.tgz" -C /tmp checks
grep -E "^(PASS|FAIL)|failed" "$out/checks.txt" | tail -50
