#!/usr/bin/env bash
# Lease 71 (2 H200s): run_checks.sh with a GPU per rank on the build with
# one-shot all_reduce to 8 MiB on 2 ranks and the tests' holds on
# testing::StreamHold. Writes its summary straight into OUT as it goes.
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/gpu_env.sh"
out="$1"; mkdir -p "$out"
{ nvidia-smi -L; date -u; } > "$out/checks.txt"
CHECK_LIMIT=120 timeout 500 "$here/run_checks.sh" /tmp/checks >> "$out/checks.txt" 2>&1
echo "run_checks rc=$?" >> "$out/checks.txt"
tar czf "$out/logs.tgz" -C /tmp checks
grep -E "^(PASS|FAIL)|failed" "$out/checks.txt" | tail -50
