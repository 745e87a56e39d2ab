#!/usr/bin/env bash
# File: bench/gpu/edge_memory.sh
#
# GPU memory the NCCL transport's ring-edge communicators take: peak
# memory.used per GPU (nvidia-smi, sampled every 100 ms) while relay's ring
# all_reduce of 64 MB runs with RELAY_NCCL_RING_EDGES=0 and =1, and with =1
# on a BASELINE collectives binary from another build (an A/B of a change
# to how the edges connect). 64 MB on 2 GPUs sends 16 MB messages, below
# the edges' threshold, so the difference is what connecting them costs.
# From the folder bench/gpu/build.sh filled.
#
# Usage: edge_memory.sh OUT_DIR     Environment: BASELINE (optional)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: edge_memory.sh OUT_DIR}"
mkdir -p "$out"
# shellcheck source=bench/gpu/gpu_env.sh
source "$here/gpu_env.sh"
gpus=$(gpu_count)
peak() {  # name command...
  local name=$1
  shift
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits \
    -lms 100 >"$out/$name.mem" 2>/dev/null &
  local sampler=$!
  sleep 0.5
  timeout 60 "$@" >"$out/$name.log" 2>&1
  local rc=$?
  sleep 0.3
  kill "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
  awk -F', *' -v name="$name" -v rc="$rc" \
    '{ if ($2 + 0 > m[$1]) m[$1] = $2 + 0 }
     END { printf "%-28s rc %s  peak MiB:", name, rc;
           for (g in m) printf " gpu%s %d", g, m[g]; printf "\n" }' "$out/$name.mem"
}
ring=(--transport nccl --ranks "$gpus" --algorithm ring --collective all_reduce
      -b 64M -e 64M -n 5 -w 1 -c 0)
peak edges_off env RELAY_NCCL_RING_EDGES=0 "$here/collectives" "${ring[@]}"
peak edges_on env RELAY_NCCL_RING_EDGES=1 "$here/collectives" "${ring[@]}"
if [ -n "${BASELINE:-}" ]; then
  peak edges_on_baseline env RELAY_NCCL_RING_EDGES=1 "$BASELINE" "${ring[@]}"
fi
