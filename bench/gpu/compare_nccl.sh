#!/usr/bin/env bash
# File: bench/gpu/compare_nccl.sh
#
# relay's NCCL transport against raw NCCL, side by side in one run, on a GPU
# host, from the folder bench/gpu/build.sh filled. For each collective it
# runs the raw-NCCL harness (bench/peers/nccl_collectives, one thread per
# GPU) and relay's bench/collectives --transport nccl (ranks as threads, one
# GPU each; once passing no stream, once each rank's own stream) over the
# same sweep, in alternating rounds (bench/relaybench), then writes the
# per-size ratios (best of rounds on each side) to OUT_DIR/ratio_C.md and
# busbw and time against size to OUT_DIR/plot.svg; the runs are in
# OUT_DIR/C/. Exits 1 if any run found wrong elements.
#
# Usage: compare_nccl.sh OUT_DIR [MAX_SIZE] [ROUNDS] [COLLECTIVES]
#   defaults: 1G, 2, "all_reduce all_gather reduce_scatter"
# STREAMS="default own" (the default) runs relay both ways; STREAMS=default
# runs only the no-stream variant. RING=1 (the default) also runs relay's own
# ring algorithm over NCCL point-to-point (variant relay-ring, no stream);
# RING=0 leaves it out. CUDA_IPC=1 (the default) also runs each collective
# over relay's cuda_ipc transport, a process per GPU under relayrun: eager
# (variant cuda_ipc), queued on each rank's own stream (cuda_ipc-on-stream)
# and replayed from a CUDA graph (cuda_ipc-graph); CUDA_IPC=0 leaves them
# out; for all_gather and all_reduce it also runs with the receive buffers
# in symmetric windows (variant cuda_ipc-window, `collectives --window 1`)
# unless WINDOW=0. SYMMETRIC=1 adds raw NCCL on symmetric windows (variant
# raw-symmetric: nccl_collectives --symmetric 1, NCCL >= 2.27); off by
# default, since each side lengthens every sweep. TORCH_SYMM=1 adds torch's
# symmetric-memory all_reduce for all_reduce (variant torch-symm,
# torch_symm_mem.py: one-shot out of place, two-shot in place, the input
# already in a symmetric buffer), where python3 imports torch; off by
# default. `relaybench table OUT/C --side S` sets one side against every
# other. CUDA_IPC_VARIANTS="NAME:VAR=VALUE[,VAR=VALUE...] ..." adds cuda_ipc
# under other settings, eager and replayed from a graph (variants
# cuda_ipc-NAME and cuda_ipc-graph-NAME), e.g.
# "flags:RELAY_CUDA_IPC_LOW_LATENCY_BYTES=0". MIN_SIZE (default 8) is the
# sweep's first size; ITERS (default 20, as nccl-tests) the timed calls a
# size: a short loop's time includes filling and draining the GPU's queue,
# so 200 or more tell a call's throughput (design note finding 42). COPY=1 (the default, with 2 or more GPUs) adds the
# GPU-to-GPU copy ceiling to every collective (variant copy, peer_copy: each
# GPU copies S bytes into the next one's memory by the copy engines, all at
# once; busbw = S / time), and each variant's fraction of it goes to
# OUT_DIR/ratio_C_vs_copy.md; COPY=0 leaves it out.
# With CUDA_VISIBLE_DEVICES set, the run uses the GPUs it names.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: compare_nccl.sh OUT_DIR [MAX_SIZE] [ROUNDS] [COLLECTIVES]}"
max="${2:-1G}"
rounds="${3:-2}"
collectives="${4:-all_reduce all_gather reduce_scatter}"
mkdir -p "$out"
# shellcheck source=bench/gpu/gpu_env.sh
source "$here/gpu_env.sh"
gpus=$(gpu_count)
sweep=(-b "${MIN_SIZE:-8}" -e "$max" -f 2 -n "${ITERS:-20}" -w 5)
{
  gpu_header "$gpus"
  echo "# NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE; sweep ${sweep[*]}; rounds $rounds (round 1 checked)"
} | tee "$out/environment.txt"
for c in $collectives; do
  # Results are checked in the first round (checking 1 GB rows on the host
  # takes longer than timing them).
  check='$([ {round} = 1 ] && echo 1 || echo 0)'
  sides=("raw=$here/nccl_collectives ${sweep[*]} -c $check -t 1 --collective $c --json {out}.json")
  if [ "${SYMMETRIC:-0}" = 1 ]; then
    sides+=("raw-symmetric=$here/nccl_collectives ${sweep[*]} -c $check -t 1 --symmetric 1 \
--collective $c --json {out}.json")
  fi
  for stream in ${STREAMS:-default own}; do
    variant=relay; [ "$stream" = own ] && variant=relay-own-stream
    sides+=("$variant=$here/collectives ${sweep[*]} -c $check --transport nccl --ranks $gpus \
--cuda-stream $stream --collective $c --json {out}.json")
  done
  if [ "${RING:-1}" = 1 ]; then
    sides+=("relay-ring=$here/collectives ${sweep[*]} -c $check --transport nccl --ranks $gpus \
--algorithm ring --collective $c --json {out}.json")
  fi
  if [ "${CUDA_IPC:-1}" = 1 ]; then
    # relay's own wiring, a process per GPU: eager on the default stream,
    # queued on each rank's own stream, and replayed from a CUDA graph.
    ipc="python3 $here/relayrun -n $gpus --no-prefix --timeout 900 -- $here/collectives \
${sweep[*]} --transport cuda_ipc --collective $c --json {out}.json"
    sides+=("cuda_ipc=$ipc -c $check"
            "cuda_ipc-on-stream=$ipc -c $check --cuda-stream own --stream-order on"
            "cuda_ipc-graph=$ipc -c 0 --api graph")
    if { [ "$c" = all_gather ] || [ "$c" = all_reduce ]; } && [ "${WINDOW:-1}" = 1 ]; then
      sides+=("cuda_ipc-window=$ipc -c $check --window 1")
    fi
    for spec in ${CUDA_IPC_VARIANTS:-}; do
      name="${spec%%:*}" vars="${spec#*:}"
      sides+=("cuda_ipc-$name=env ${vars//,/ } $ipc -c $check"
              "cuda_ipc-graph-$name=env ${vars//,/ } $ipc -c 0 --api graph")
    done
  fi
  if [ "$c" = all_reduce ] && [ "${TORCH_SYMM:-0}" = 1 ]; then
    if python3 -c "import torch.distributed._symmetric_memory" 2>/dev/null; then
      sides+=("torch-symm=python3 $here/relayrun -n $gpus --no-prefix --timeout 900 -- \
python3 $here/torch_symm_mem.py ${sweep[*]} -c $check --json {out}.json")
    else
      echo "TORCH_SYMM=1: python3 cannot import torch's symmetric memory; side torch-symm left out"
    fi
  fi
  if [ "${COPY:-1}" = 1 ] && [ "$gpus" -ge 2 ]; then
    # The links' ceiling: every GPU copying S bytes to the next at once.
    sides+=("copy=$here/peer_copy ${sweep[*]} -c $check --json {out}.json")
  fi
  PYTHONPATH="$here" python3 -m relaybench rounds --rounds "$rounds" --out "$out/$c" "${sides[@]}"
  PYTHONPATH="$here" python3 -m relaybench table "$out/$c" --reference raw --stat best \
    | tee "$out/ratio_$c.md" || status=1
  if [[ " ${sides[*]} " == *" copy="* ]]; then
    PYTHONPATH="$here" python3 -m relaybench table "$out/$c" --reference copy --stat best \
      > "$out/ratio_${c}_vs_copy.md" || status=1
  fi
done
PYTHONPATH="$here" python3 -m relaybench plot "$out/plot.svg" $(printf "$out/%s " $collectives)
echo "wrote $out"
exit "${status:-0}"
