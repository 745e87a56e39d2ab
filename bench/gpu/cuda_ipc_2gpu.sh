#!/usr/bin/env bash
# File: bench/gpu/cuda_ipc_2gpu.sh
#
# What cuda_ipc still has to show on 2 GPUs (docs/design/cuda-ipc-transport.md,
# "Open"), in four parts that each fit one 10-minute device call, from the
# folder bench/gpu/build.sh filled:
#   checks  run_checks.sh (with SIGKILL of each rank mid-all_reduce on
#           every protocol, and the conformance suite on each).
#   small   all_reduce 8 B - 8 MB, 3 alternating rounds: raw NCCL (default
#           and symmetric) against cuda_ipc by default, with the lines after
#           the words, the lines alone, words to 1 MiB, and the flag path;
#           eager and replayed from a graph.
#   large   all_gather 8 B - 8 MB (words to 1 MiB, flags), 3 rounds; then
#           all_reduce 32 MB - 1 GB against raw NCCL, into windows, and the
#           GPU-to-GPU copy ceiling, 2 rounds.
#   reduce_scatter  8 B - 8 MB against raw NCCL (default and symmetric),
#           3 rounds; then 32 MB - 1 GB, 2 rounds.
# Each part writes OUT_DIR/PART/ (compare_nccl.sh's folders packed as .tgz)
# and prints its summary.
#
# Usage: cuda_ipc_2gpu.sh OUT_DIR checks|small|large|reduce_scatter
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: cuda_ipc_2gpu.sh OUT_DIR checks|small|large|reduce_scatter}"
part="${2:?usage: cuda_ipc_2gpu.sh OUT_DIR checks|small|large|reduce_scatter}"
# shellcheck source=bench/gpu/gpu_env.sh
source "$here/gpu_env.sh"
if [ "$(gpu_count)" -lt 2 ]; then
  echo "cuda_ipc_2gpu.sh: needs 2 GPUs, $(gpu_count) visible" >&2
  exit 2
fi
mkdir -p "$out/$part"
cd "$here" || exit 2
pack() {  # folder under OUT_DIR/PART: packed, then removed
  tar czf "$out/$part/$1.tgz" -C "$out/$part" "$1" && rm -rf "${out:?}/$part/$1"
}
case "$part" in
  checks)
    timeout 570 ./run_checks.sh "$out/$part/checks" 2>&1 | tee "$out/$part/checks.txt" | tail -30
    pack checks
    ;;
  small)
    SYMMETRIC=1 STREAMS=" " RING=0 WINDOW=0 \
    CUDA_IPC_VARIANTS="lines:RELAY_CUDA_IPC_LINES_BYTES=3932160 linesonly:RELAY_CUDA_IPC_LOW_LATENCY_BYTES=0,RELAY_CUDA_IPC_LINES_BYTES=3932160 words1m:RELAY_CUDA_IPC_LOW_LATENCY_BYTES=1048576 flags:RELAY_CUDA_IPC_LOW_LATENCY_BYTES=0" \
      timeout 570 ./compare_nccl.sh "$out/$part/ar" 8M 3 all_reduce > "$out/$part/ar.log" 2>&1
    echo "all_reduce 8 B - 8 MB: rc=$?"
    for ref in raw cuda_ipc-flags cuda_ipc-graph-flags; do
      PYTHONPATH=. python3 -m relaybench table "$out/$part/ar/all_reduce" --reference "$ref" \
        --stat median --intervals
    done > "$out/$part/ar_tables.md" 2>&1
    head -40 "$out/$part/ar_tables.md"
    pack ar
    ;;
  large)
    SYMMETRIC=1 STREAMS=" " RING=0 WINDOW=0 \
    CUDA_IPC_VARIANTS="words1m:RELAY_CUDA_IPC_LOW_LATENCY_BYTES=1048576 flags:RELAY_CUDA_IPC_LOW_LATENCY_BYTES=0" \
      timeout 300 ./compare_nccl.sh "$out/$part/ag" 8M 3 all_gather > "$out/$part/ag.log" 2>&1
    echo "all_gather 8 B - 8 MB: rc=$?"
    MIN_SIZE=32M STREAMS=" " RING=0 \
      timeout 270 ./compare_nccl.sh "$out/$part/big" 1G 2 all_reduce > "$out/$part/big.log" 2>&1
    echo "all_reduce 32 MB - 1 GB: rc=$?"
    head -40 "$out/$part/big/ratio_all_reduce_vs_copy.md" 2>/dev/null
    pack ag
    pack big
    ;;
  reduce_scatter)
    SYMMETRIC=1 STREAMS=" " RING=0 WINDOW=0 \
      timeout 300 ./compare_nccl.sh "$out/$part/rs" 8M 3 reduce_scatter > "$out/$part/rs.log" 2>&1
    echo "reduce_scatter 8 B - 8 MB: rc=$?"
    MIN_SIZE=32M STREAMS=" " RING=0 \
      timeout 270 ./compare_nccl.sh "$out/$part/big" 1G 2 reduce_scatter > "$out/$part/big.log" 2>&1
    echo "reduce_scatter 32 MB - 1 GB: rc=$?"
    PYTHONPATH=. python3 -m relaybench table "$out/$part/rs/reduce_scatter" --reference raw \
      --stat median --intervals > "$out/$part/rs_tables.md" 2>&1
    head -30 "$out/$part/rs_tables.md"
    head -30 "$out/$part/big/ratio_reduce_scatter.md" 2>/dev/null
    pack rs
    pack big
    ;;
  *)
    echo "cuda_ipc_2gpu.sh: unknown part '$part' (checks, small, large or reduce_scatter)" >&2
    exit 2
    ;;
esac
