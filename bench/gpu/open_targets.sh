#!/usr/bin/env bash
# File: bench/gpu/open_targets.sh
#
# One command for a GPU host lease: the checks, then every measurement
# issue 4's open targets need, each bounded in time, on 2 GPUs and (where
# the host has them) 4, from the folder bench/gpu/build.sh filled. Device
# time is scarce: the order puts what decides a target first, and each step
# is cut off at its limit rather than let one step eat the lease; the
# limits add up to 580 s, inside one 600 s device call. Writes
# everything under OUT_DIR and packs it into OUT_DIR.tgz at the end (a
# device tool fetches a few files, not a tree).
#
#   1. device_reduce_test and nccl_transport_test (conformance on 2 and 4
#      GPUs as threads, Split over ncclCommSplit, bad input, deadlines)
#   2. NCCL's own ring exchange (nccl_collectives --collective sendrecv,
#      256 MB - 1 GB): the point-to-point ceiling of relay's ring
#   3. relay's ring against native all_reduce (ring_over_nccl.sh), with
#      the reductions' grid capped at each REDUCE_BLOCKS
#   4. the time relay adds to small calls (nccl_latency.sh), against raw
#      NCCL and against BASELINE (another build's collectives) if given
#
# Usage: open_targets.sh OUT_DIR
# Environment: BASELINE (path of another build's collectives binary),
#   REDUCE_BLOCKS (default "16 33 66"), LIMIT_SCALE (default 1: multiply
#   every step's time limit).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: open_targets.sh OUT_DIR}"
mkdir -p "$out"
# shellcheck source=bench/gpu/gpu_env.sh
source "$here/gpu_env.sh"
all=$(gpu_count)
scale="${LIMIT_SCALE:-1}"
step() {  # name limit_s command...
  local name="$1" limit=$(($2 * scale)) start=$SECONDS
  shift 2
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "$name: rc $rc in $((SECONDS - start)) s (limit $limit s)"
}
nvidia-smi -L >"$out/gpus.txt" 2>&1
nvidia-smi topo -m >>"$out/gpus.txt" 2>&1
step device_reduce_test 40 "$here/device_reduce_test"
step nccl_transport_test 120 "$here/nccl_transport_test"
tail -3 "$out/nccl_transport_test.log"
for n in 2 4; do
  [ "$n" -le "$all" ] || continue
  devices=$(seq -s, 0 $((n - 1)))
  step "sendrecv_${n}gpu" 30 env CUDA_VISIBLE_DEVICES="$devices" \
    "$here/nccl_collectives" -b 256M -e 1G -f 2 -n 20 -w 5 -c 1 -t 1 \
    --collective sendrecv --json "$out/sendrecv_${n}gpu.json"
  step "ring_${n}gpu" 110 env CUDA_VISIBLE_DEVICES="$devices" CHECK=0 \
    MIN_SIZE=256M DEPTHS=2 REDUCE_BLOCKS="${REDUCE_BLOCKS:-16 33 66}" \
    "$here/ring_over_nccl.sh" "$out/ring_${n}gpu" 1
done
for n in 2 4; do
  [ "$n" -le "$all" ] || continue
  devices=$(seq -s, 0 $((n - 1)))
  variants="relay relay-own-stream"
  [ -n "${BASELINE:-}" ] && variants="$variants baseline baseline-own-stream"
  step "latency_${n}gpu" 70 env CUDA_VISIBLE_DEVICES="$devices" FACTOR=4 \
    VARIANTS="$variants" "$here/nccl_latency.sh" "$out/latency_${n}gpu" 5 all_reduce
done
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
for f in "$out"/ring_*gpu/ratio_all_reduce.md; do
  [ -f "$f" ] && { echo "== $f"; grep -E "^###|^\| [0-9]" "$f" | cut -c1-100; }
done
for f in "$out"/latency_*gpu/added_all_reduce.md; do
  [ -f "$f" ] && { echo "== $f"; grep -E "^###|largest" "$f"; }
done
grep -h "^ *[0-9]" "$out"/sendrecv_*gpu.log 2>/dev/null | head -8
echo "packed $out.tgz"
