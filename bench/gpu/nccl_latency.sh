#!/usr/bin/env bash
# File: bench/gpu/nccl_latency.sh
#
# The time relay's NCCL transport adds to small collectives (issue 4's
# "added latency <= 1 us at 8 B - 64 KB"), on a GPU host, from the folder
# bench/gpu/build.sh filled. Raw NCCL (bench/peers/nccl_collectives, one
# thread per GPU, each on its own stream) and each relay variant run the
# same sweep in turn, ROUNDS times, with ITERS calls queued per size; then
# nccl_latency.py prints, per size, the median over rounds of each side and
# of the per-round differences (relay's round k minus raw's round k).
# compare_nccl.sh's 20 calls a size are too few for microseconds.
#
# Usage: nccl_latency.sh OUT_DIR [ROUNDS] [COLLECTIVES]
#   defaults: 5, "all_reduce all_gather reduce_scatter"
# Environment:
#   MAX_SIZE  last size of the sweep (default 64K; the first is 8)
#   FACTOR    the sweep's step (default 2)
#   ITERS     timed calls per size (default 1000), WARMUP (default 100)
#   VARIANTS  which relay variants run (default "relay relay-own-stream"):
#     relay                 the legacy default stream (no stream passed)
#     relay-own-stream      each rank's own stream (CollectiveOptions::stream)
#     relay-on-stream       own stream, StreamOrder::kOnStream (NCCL called
#                           on it: no event, no wait)
#     relay-on-legacy       the legacy default stream, kOnStream
#     diag-on-stream-noptr  relay-on-stream without the pointer checks
#     diag-on-stream-lazy-watchdog
#                           relay-on-stream with the watchdog looking at its
#                           pending requests (cudaEventQuery) at most every
#                           WATCHDOG_PAUSE_US (default 5000) instead of 50 us
#     diag-on-stream-no-watch
#                           relay-on-stream with no request handed to the
#                           watchdog (they complete when waited on)
#     baseline-on-stream    relay-on-stream with the collectives binary at
#                           $BASELINE
#     raw-event             raw NCCL recording one CUDA event after every
#                           call, as relay does (nccl_collectives
#                           --event-per-call 1)
#     baseline, baseline-own-stream
#                           relay and relay-own-stream with the collectives
#                           binary at $BASELINE (another build: an A/B of a
#                           change in one run)
#   PROCESSES=1  one process per GPU under relayrun (raw NCCL too, with
#                nccl_collectives --id-file) instead of one process with a
#                thread per GPU: no two ranks' threads meet in one process's
#                CUDA driver
#   The diag-* variant runs collectives_diag, whose NCCL transport takes the
#   RELAY_NCCL_DIAG_* switch (transports/nccl/nccl_transport.cc): it takes
#   a part of the per-call path out to show what it costs.
# With CUDA_VISIBLE_DEVICES set, the run uses the GPUs it names.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: nccl_latency.sh OUT_DIR [ROUNDS] [COLLECTIVES]}"
rounds="${2:-5}"
collectives="${3:-all_reduce all_gather reduce_scatter}"
variants="${VARIANTS:-relay relay-own-stream}"
mkdir -p "$out"
# shellcheck source=bench/gpu/gpu_env.sh
source "$here/gpu_env.sh"
gpus=$(gpu_count)
sweep=(-b 8 -e "${MAX_SIZE:-64K}" -f "${FACTOR:-2}" -n "${ITERS:-1000}" -w "${WARMUP:-100}" -c 0)
{
  gpu_header "$gpus"
  echo "# NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE; sweep ${sweep[*]}; rounds $rounds; variants $variants; processes ${PROCESSES:-0}"
} | tee "$out/environment.txt"
# PROCESSES=1: each binary runs as one rank per GPU under relayrun, rank
# 0's output (the table) kept; --no-prefix so the table parses as is.
launch=()
ranks=(--ranks "$gpus")
if [ "${PROCESSES:-0}" = 1 ]; then
  launch=(python3 "$here/relayrun" -n "$gpus" --timeout 300 --no-prefix --)
  ranks=()
fi

run_variant() {  # variant collective round
  local v="$1" c="$2" k="$3" bin="$here/collectives" stream=own order=after
  local -a env=()
  case "$v" in
    relay) stream=default ;;
    relay-own-stream) ;;
    relay-on-stream) order=on ;;
    relay-on-legacy) stream=default; order=on ;;
    baseline) bin="${BASELINE:?}"; stream=default ;;
    baseline-own-stream) bin="${BASELINE:?}" ;;
    baseline-on-stream) bin="${BASELINE:?}"; order=on ;;
    diag-on-stream-no-watch)
      bin="$here/collectives_diag"; order=on; env=(RELAY_NCCL_DIAG_NO_WATCH=1) ;;
    diag-on-stream-noptr)
      bin="$here/collectives_diag"; order=on; env=(RELAY_NCCL_DIAG_NOPTR=1) ;;
    diag-on-stream-lazy-watchdog)
      bin="$here/collectives_diag"; order=on
      env=(RELAY_NCCL_DIAG_WATCHDOG_PAUSE_US="${WATCHDOG_PAUSE_US:-5000}") ;;
    raw-event)
      if [ "${PROCESSES:-0}" = 1 ]; then
        "${launch[@]}" "$here/nccl_collectives" "${sweep[@]}" --collective "$c" --event-per-call 1 \
          --id-file "$out/nccl_id_${v}_${c}_$k" --json "$out/${v}_${c}_$k.json" >"$out/${v}_${c}_$k.txt"
      else
        "$here/nccl_collectives" "${sweep[@]}" -t 1 --collective "$c" --event-per-call 1 \
          --json "$out/${v}_${c}_$k.json" >"$out/${v}_${c}_$k.txt"
      fi
      return ;;
    *) echo "nccl_latency.sh: unknown variant $v" >&2; exit 2 ;;
  esac
  env "${env[@]}" "${launch[@]}" "$bin" "${sweep[@]}" --transport nccl "${ranks[@]}" \
    --cuda-stream "$stream" --stream-order "$order" --collective "$c" \
    --json "$out/${v}_${c}_$k.json" >"$out/${v}_${c}_$k.txt"
}

for k in $(seq 1 "$rounds"); do
  for c in $collectives; do
    echo "== $(date -u +%T) round $k $c: raw" >&2
    if [ "${PROCESSES:-0}" = 1 ]; then
      "${launch[@]}" "$here/nccl_collectives" "${sweep[@]}" --collective "$c" \
        --id-file "$out/nccl_id_${c}_$k" --json "$out/raw_${c}_$k.json" >"$out/raw_${c}_$k.txt"
    else
      "$here/nccl_collectives" "${sweep[@]}" -t 1 --collective "$c" \
        --json "$out/raw_${c}_$k.json" >"$out/raw_${c}_$k.txt"
    fi
    for v in $variants; do
      echo "== $(date -u +%T) round $k $c: $v" >&2
      run_variant "$v" "$c" "$k"
    done
  done
done
for c in $collectives; do
  python3 "$here/nccl_latency.py" "$c" "$out" "$rounds" $variants | tee "$out/added_$c.md"
done
echo "wrote $out"
