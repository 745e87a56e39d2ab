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
# runs only the no-stream variant.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: compare_nccl.sh OUT_DIR [MAX_SIZE] [ROUNDS] [COLLECTIVES]}"
max="${2:-1G}"
rounds="${3:-2}"
collectives="${4:-all_reduce all_gather reduce_scatter}"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
gpus=$(nvidia-smi -L | wc -l)
sweep=(-b 8 -e "$max" -f 2 -n 20 -w 5)
{
  echo "# $(date -u +%FT%TZ) $(hostname): $gpus x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
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
    for stream in ${STREAMS:-default own}; do
      variant=relay; [ "$stream" = own ] && variant=relay-own-stream
      echo "== $(date -u +%T) $c round $round: $variant" >&2
      "$here/collectives" "${sweep[@]}" -c "$check" --transport nccl --ranks "$gpus" \
        --cuda-stream "$stream" --collective "$c" \
        --json "$out/${variant}_${c}_$round.json" >"$out/${variant}_${c}_$round.txt"
    done
  done
  variants=relay
  [[ " ${STREAMS:-default own} " == *" own "* ]] && variants="relay relay-own-stream"
  python3 "$here/compare_nccl.py" "$c" "$out" "$rounds" $variants \
    | tee "$out/ratio_$c.md"
done
python3 "$here/plot_busbw.py" "$out" "$out/busbw.svg" $collectives
echo "wrote $out"
