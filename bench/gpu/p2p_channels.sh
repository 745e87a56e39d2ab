#!/usr/bin/env bash
# File: bench/gpu/p2p_channels.sh
#
# relay's ring all_reduce over NCCL with and without the NCCL transport's
# own point-to-point communicator (RELAY_NCCL_P2P_CHANNELS, default 64;
# 0 = point-to-point on the collectives' communicator), on 2 and 4 GPUs,
# against native all_reduce in the same run (ring_over_nccl.sh, one round,
# unchecked: the conformance suite checks the same code), at depths 2 and 1
# with the default reduction grid, and depth 2 with a full one. First the GPU
# tests that this communicator and loopback's device messages touch, and
# NCCL's INIT log of one short run, which names each communicator's
# point-to-point channels. Each step is bounded; the limits add up to 560
# s. From the folder bench/gpu/build.sh filled.
#
# Usage: p2p_channels.sh OUT_DIR
# Environment: CHANNELS (default "64 0": the RELAY_NCCL_P2P_CHANNELS values
#   compared), MIN_SIZE (default 32M), EXTRA (default
#   "NCCL_P2P_NVL_CHUNKSIZE=131072": NCCL settings run once more each, on 4
#   GPUs with the first CHANNELS value), LIMIT_SCALE (default 1)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: p2p_channels.sh OUT_DIR}"
mkdir -p "$out"
# shellcheck source=bench/gpu/gpu_env.sh
source "$here/gpu_env.sh"
all=$(gpu_count)
step() { timed_step "$out" "$@"; }  # name limit_s command...
nvidia-smi -L >"$out/gpus.txt" 2>&1
step loopback_device_test 40 "$here/loopback_device_test"
tail -3 "$out/loopback_device_test.log"
step nccl_transport_test 90 "$here/nccl_transport_test"
tail -3 "$out/nccl_transport_test.log"
n_init=$(( all < 4 ? all : 4 ))
step init_log 30 env CUDA_VISIBLE_DEVICES="$(seq -s, 0 $((n_init - 1)))" \
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT "$here/collectives" --transport nccl \
  --ranks "$n_init" --algorithm ring --collective all_reduce -b 64M -e 64M \
  -n 2 -w 1 -c 1
grep -iE "p2p channels|relay point" "$out/init_log.log" | sort | uniq -c | head -8
channels="${CHANNELS:-64 0}"
first=${channels%% *}
ring() {  # name gpus env...
  local name=$1 n=$2
  shift 2
  step "$name" 75 env CUDA_VISIBLE_DEVICES="$(seq -s, 0 $((n - 1)))" "$@" \
    CHECK=0 MIN_SIZE="${MIN_SIZE:-32M}" DEPTHS="2 1" REDUCE_BLOCKS=0 \
    "$here/ring_over_nccl.sh" "$out/$name" 1
  grep -E "^###|^\| [0-9]" "$out/$name/ratio_all_reduce.md" 2>/dev/null | cut -c1-100
}
for n in 2 4; do
  [ "$n" -le "$all" ] || continue
  for p in $channels; do
    ring "ring_${n}gpu_p2p$p" "$n" RELAY_NCCL_P2P_CHANNELS="$p"
  done
done
if [ "$all" -ge 4 ]; then
  for setting in ${EXTRA-NCCL_P2P_NVL_CHUNKSIZE=131072}; do
    ring "ring_4gpu_p2p${first}_$(tr '=' '_' <<<"$setting")" 4 \
      RELAY_NCCL_P2P_CHANNELS="$first" "$setting"
  done
fi
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
echo "packed $out.tgz"
