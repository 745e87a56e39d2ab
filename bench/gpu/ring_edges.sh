#!/usr/bin/env bash
# File: bench/gpu/ring_edges.sh
#
# relay's ring all_reduce over NCCL with and without the NCCL transport's
# ring-edge communicators (RELAY_NCCL_RING_EDGES=1; off by default;
# transports/nccl/ring_edges.h), on 4 and 2 GPUs,
# against native all_reduce in the same run (ring_over_nccl.sh, one round,
# unchecked: the conformance suite checks the same code). First the NCCL
# transport's GPU tests, which cover the edges (conformance on all GPUs,
# one batch to every rank), and the raw-NCCL ring step on one
# communicator against one per edge (neighbour_exchange). Each step is
# bounded. From the folder bench/gpu/build.sh filled.
#
# Usage: ring_edges.sh OUT_DIR
# Environment: MIN_SIZE (default 32M), DEPTHS (default "2 4"),
#   REDUCE_BLOCKS (ring_over_nccl.sh's; default none), ROUNDS (default 1),
#   TWO_GPUS (default 1; 0 skips the 2-GPU runs), LIMIT_SCALE (default 1)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: ring_edges.sh OUT_DIR}"
mkdir -p "$out"
# shellcheck source=bench/gpu/gpu_env.sh
source "$here/gpu_env.sh"
all=$(gpu_count)
step() { timed_step "$out" "$@"; }  # name limit_s command...
nvidia-smi -L >"$out/gpus.txt" 2>&1
step nccl_transport_test 150 "$here/nccl_transport_test"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |OK \]|FAILED \]" "$out/nccl_transport_test.log" | tail -20
step neighbour_exchange 60 "$here/neighbour_exchange" 20 8 256
grep -v "MB$" "$out/neighbour_exchange.log"
ring() {  # name gpus env...
  local name=$1 n=$2
  shift 2
  step "$name" $((90 * ${ROUNDS:-1})) env CUDA_VISIBLE_DEVICES="$(seq -s, 0 $((n - 1)))" "$@" \
    CHECK=0 MIN_SIZE="${MIN_SIZE:-32M}" DEPTHS="${DEPTHS:-2 4}" \
    REDUCE_BLOCKS="${REDUCE_BLOCKS:-}" "$here/ring_over_nccl.sh" "$out/$name" "${ROUNDS:-1}"
  grep -E "^###|^\| [0-9]" "$out/$name/ratio_all_reduce.md" 2>/dev/null | cut -c1-100
}
if [ "$all" -ge 4 ]; then
  ring ring_4gpu_edges 4 RELAY_NCCL_RING_EDGES=1
  ring ring_4gpu_no_edges 4 RELAY_NCCL_RING_EDGES=0
  ring ring_4gpu_every_edge 4 RELAY_NCCL_RING_EDGES=1 RELAY_NCCL_RING_EDGE_BYTES=0
fi
if [ "$all" -ge 2 ] && [ "${TWO_GPUS:-1}" = 1 ]; then
  ring ring_2gpu_edges 2 RELAY_NCCL_RING_EDGES=1
  ring ring_2gpu_no_edges 2
fi
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
echo "packed $out.tgz"
