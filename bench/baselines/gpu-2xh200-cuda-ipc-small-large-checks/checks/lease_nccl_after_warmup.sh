#!/usr/bin/env bash
# 2 H200s: nccl_transport_test (a GPU per rank thread), after the refusal check's warm-up call.
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?}"
cd "$here"
source ./gpu_env.sh
s=$SECONDS; timeout 120 ./nccl_transport_test > $out/nccl_transport_test.log 2>&1
echo "nccl_transport_test rc=$? ($((SECONDS - s)) s)"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|Captur" $out/nccl_transport_test.log
