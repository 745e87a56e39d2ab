#!/usr/bin/env bash
# 2 H200s: cuda_ipc_2gpu.sh checks (run_checks.sh with a GPU per rank).
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?}"
cd "$here"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
CHECK_LIMIT=200 bash ./cuda_ipc_2gpu.sh "$out" checks
