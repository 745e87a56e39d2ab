#!/usr/bin/env bash
# File: bench/gpu/compare_nccl.sh
#
# relay's NCCL transport against raw NCCL, side by side in one run, on a GPU
# host, from the folder bench/gpu/build.sh filled. For each collective it
# runs the raw-NCCL harness (bench/peers/nccl_collectives, one thread per
# GPU) and relay's bench/collectives --transport nccl (ranks as threads, one
# GPU each; once passing no stream, once each rank's own stream) over the
# same sweep, alternating ROUNDS times, then writes the
# per-size ratios (compare_nccl.py) and a busbw plot (plot_busbw.py).
#
# Usage: compare_nccl.sh OUT_DIR [MAX_SIZE] [ROUNDS] [COLLECTIVES]
#   defaults: 1G, 2, "all_reduce all_gather reduce_scatter"
# STREAMS="default own" (the default) runs relay both ways; STREAMS=default
# runs only the no-stream variant. RING=1 (the default) also runs relay's own
# ring algorithm over NCCL point-to-point (variant relay-ring, no stream);
# RING=0 leaves it out. MIN_SIZE (default 8) is the sweep's first size.
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
sweep=(-b "${MIN_SIZE:-8}" -e "$max" -f 2 -n 20 -w 5)
{
  gpu_header "$gpus"
  echo "# NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE; sweep ${sweep[*]}; rounds $rounds (round 1 checked)"
} | tee "$out/environment.txt"
for c in $collectives; do
  for round in $(seq 1 "$rounds"); do
    # Results are checked in the first round (checking 1 GB rows on the
    # host takes longer than timing them).
    check=$([ "$round" = 1 ] && echo 1 || echo 0)
    echo "== $(date -u +%T) $c round $round: raw NCCL" >&2
    "$here/nccl_collectives" "${sweep[@]}" -c "$check" -t 1 --collective "$c" \
      --json "$out/raw_${c}_$round.json" >"$out/raw_${c}_$round.txt"
    variants=""
    for stream in ${STREAMS:-default own}; do
      variant=relay; [ "$stream" = own ] && variant=relay-own-stream
      variants="$variants $variant"
      echo "== $(date -u +%T) $c round $round: $variant" >&2
      "$here/collectives" "${sweep[@]}" -c "$check" --transport nccl --ranks "$gpus" \
        --cuda-stream "$stream" --collective "$c" \
        --json "$out/${variant}_${c}_$round.json" >"$out/${variant}_${c}_$round.txt"
    done
    if [ "${RING:-1}" = 1 ]; then
      variants="$variants relay-ring"
      echo "== $(date -u +%T) $c round $round: relay-ring" >&2
      "$here/collectives" "${sweep[@]}" -c "$check" --transport nccl --ranks "$gpus" \
        --algorithm ring --collective "$c" \
        --json "$out/relay-ring_${c}_$round.json" >"$out/relay-ring_${c}_$round.txt"
    fi
  done
  python3 "$here/compare_nccl.py" "$c" "$out" "$rounds" $variants \
    | tee "$out/ratio_$c.md"
done
python3 "$here/plot_busbw.py" "$out" "$out/busbw.svg" $collectives
echo "wrote $out"
