#!/usr/bin/env bash
# File: bench/gpu/ring_over_nccl.sh
#
# relay's own ring all_reduce on device buffers over NCCL point-to-point
# (the stream executor, collectives/stream_executor.h) against NCCL's native
# all_reduce, on a GPU host, from the folder bench/gpu/build.sh filled
# (issue 4: the ring at >= 90% of native busbw from 256 MB). Each round runs
# raw NCCL (bench/peers/nccl_collectives -t 1), relay's native all_reduce,
# and relay's ring at each pipeline depth (RELAY_PIPELINE_DEPTH: the lanes
# of a call, each on its own stream), over the same sweep; round 1 checks
# every element. compare_nccl.py then prints best-of-rounds ratios.
#
# Usage: ring_over_nccl.sh OUT_DIR [ROUNDS]       (default 2)
# Environment:
#   MIN_SIZE, MAX_SIZE  the sweep (default 64M .. 1G, x2)
#   DEPTHS              pipeline depths to run (default "2 4 8"); variant
#                       ring-dN
#   REDUCE_BLOCKS       also run the first depth with the ring's device
#                       reductions capped at B blocks, for each B listed
#                       (RELAY_STREAM_REDUCE_BLOCKS, default 16; 0 = a full
#                       grid; variant ring-dN-bB): a full grid keeps NCCL's
#                       next kernel from starting beside it
#   ONE_WAY=1           also run the first depth with the ring going one way
#                       only (RELAY_RING_BIDIRECTIONAL=0; variant
#                       ring-dN-oneway): on more than 2 GPUs the default
#                       ring sends half of each segment each way
#   ENV_VARIANTS        also run the first depth under other environments:
#                       "NAME:VAR=VALUE[,VAR=VALUE...] ..." gives variant
#                       ring-dN-NAME (for example
#                       "chunk128k:NCCL_P2P_NVL_CHUNKSIZE=131072")
#   BASELINE            path of a collectives binary from another build: its
#                       ring (default depth) runs too, as variant
#                       ring-baseline (an A/B of a change in one run)
#   CHECK=0             check no round (relay's host-side check of 1 GB rows
#                       takes about a minute a variant; the conformance
#                       suite checks the same code on device buffers)
# With CUDA_VISIBLE_DEVICES set, the run uses the GPUs it names.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: ring_over_nccl.sh OUT_DIR [ROUNDS]}"
rounds="${2:-2}"
mkdir -p "$out"
# shellcheck source=bench/gpu/gpu_env.sh
source "$here/gpu_env.sh"
gpus=$(gpu_count)
sweep=(-b "${MIN_SIZE:-64M}" -e "${MAX_SIZE:-1G}" -f 2 -n 20 -w 5)
depths="${DEPTHS:-2 4 8}"
{
  gpu_header "$gpus"
  echo "# NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE; sweep ${sweep[*]}; rounds $rounds; depths $depths; one-way variant ${ONE_WAY:-0}; environment variants ${ENV_VARIANTS:-none}; reduce-block variants ${REDUCE_BLOCKS:-none} (others: RELAY_STREAM_REDUCE_BLOCKS=${RELAY_STREAM_REDUCE_BLOCKS:-default}); baseline $(basename "${BASELINE:-none}"); check ${CHECK:-1}"
} | tee "$out/environment.txt"
c=all_reduce
variants=relay
for d in $depths; do variants="$variants ring-d$d"; done
first_depth=${depths%% *}
for b in ${REDUCE_BLOCKS:-}; do variants="$variants ring-d$first_depth-b$b"; done
[ "${ONE_WAY:-0}" = 1 ] && variants="$variants ring-d$first_depth-oneway"
declare -A variant_env=()
for spec in ${ENV_VARIANTS:-}; do
  name="${spec%%:*}"
  [[ "$name" =~ ^[A-Za-z0-9_]+$ && "$spec" == *:*=* ]] || {
    echo "ring_over_nccl.sh: ENV_VARIANTS entry '$spec' is not NAME:VAR=VALUE[,...]" >&2
    exit 2
  }
  variants="$variants ring-d$first_depth-$name"
  variant_env[ring-d$first_depth-$name]="${spec#*:}"
done
[ -n "${BASELINE:-}" ] && variants="$variants ring-baseline"
for k in $(seq 1 "$rounds"); do
  check=$([ "$k" = 1 ] && [ "${CHECK:-1}" = 1 ] && echo 1 || echo 0)
  echo "== $(date -u +%T) round $k: raw" >&2
  "$here/nccl_collectives" "${sweep[@]}" -c "$check" -t 1 --collective "$c" \
    --json "$out/raw_${c}_$k.json" >"$out/raw_${c}_$k.txt"
  for v in $variants; do
    echo "== $(date -u +%T) round $k: $v" >&2
    bin="$here/collectives"
    args=(--algorithm ring)
    depth_env=()
    if [ -n "${variant_env[$v]:-}" ]; then
      IFS=',' read -r -a depth_env <<<"${variant_env[$v]}"
      depth_env+=(RELAY_PIPELINE_DEPTH="$first_depth")
    elif [[ "$v" =~ ^ring-d([0-9]+)(-b([0-9]+))?(-oneway)?$ ]]; then
      depth_env=(RELAY_PIPELINE_DEPTH="${BASH_REMATCH[1]}")
      [ -n "${BASH_REMATCH[3]}" ] &&
        depth_env+=(RELAY_STREAM_REDUCE_BLOCKS="${BASH_REMATCH[3]}")
      [ -n "${BASH_REMATCH[4]}" ] && depth_env+=(RELAY_RING_BIDIRECTIONAL=0)
    elif [ "$v" = relay ]; then
      args=()
    elif [ "$v" = ring-baseline ]; then
      bin="$BASELINE"
    fi
    env "${depth_env[@]}" "$bin" "${sweep[@]}" -c "$check" --transport nccl \
      --ranks "$gpus" --collective "$c" "${args[@]}" \
      --json "$out/${v}_${c}_$k.json" >"$out/${v}_${c}_$k.txt"
  done
done
python3 "$here/compare_nccl.py" "$c" "$out" "$rounds" $variants | tee "$out/ratio_$c.md"
echo "wrote $out"
