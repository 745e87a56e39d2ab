#!/usr/bin/env bash
# 2 H200s: cuda_ipc_2gpu.sh small (all_reduce 8 B - 8 MB against raw NCCL, default and
# symmetric; eager and replayed from a graph; 3 alternating rounds).
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?}"
cd "$here"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvidia-smi topo -m | head -4
bash ./cuda_ipc_2gpu.sh "$out" small
