#!/usr/bin/env bash
# File: bench/gpu/open_targets.sh
#
# One command for a GPU host lease: the checks, then every measurement
# issue 4's open targets need, each bounded in time, on 2 GPUs and (where
# the host has them) 4, from the folder bench/gpu/build.sh filled. Device
# time is scarce: the order puts what decides a target first, and each step
# is cut off at its limit rather than let one step eat the lease; the
# limits add up to 580 s with 4 GPUs, inside one 600 s device call. Writes
# everything under OUT_DIR and packs it into OUT_DIR.tgz at the end (a
# device tool fetches a few files, not a tree).
#
#   0. host.txt: the CPU, its clocksource and clock read costs (clock_cost)
#   1. device_reduce_test, nccl_transport_test (conformance on 2 and 4
#      GPUs as threads, Split over ncclCommSplit, bad input, deadlines)
#      and loopback_device_test (loopback on device memory)
#   2. relay's ring against native all_reduce (ring_over_nccl.sh) at the
#      default reduction blocks (32), also with each REDUCE_BLOCKS listed
#      (0: a full grid); on 4 GPUs also over the ring-edge communicators
#      (RELAY_NCCL_RING_EDGES=1, ring_4gpu_edges), which were measured on 4
#      GPUs only with 16 blocks and before the 48 MiB threshold
#   3. native all_to_all on the point-to-point communicator against the
#      collectives' one on every GPU (p2p_comm_collectives.sh, 2 rounds),
#      measured on 2 GPUs only
#   4. NCCL's point-to-point bandwidth by message size, the ring's ceiling,
#      under each of NCCL's channel settings in P2P_ENVS (p2p_by_size.sh)
#   5. the time relay adds to small all_reduce calls (added_latency:
#      raw NCCL, raw NCCL + an event, relay with kOnStream, in alternating
#      blocks in one process) on 2 and on 4 GPUs; with LATENCY=1 also
#      nccl_latency.sh (legacy stream, own stream, kOnStream against raw
#      NCCL, and against BASELINE, another build's collectives, if given),
#      whose 140 s do not fit the 580 s with the rest: set LIMIT_SCALE or
#      drop a step
#
# Usage: open_targets.sh OUT_DIR
# Environment: BASELINE (path of another build's collectives binary),
#   REDUCE_BLOCKS (default none), P2P_ENVS (default
#   "NCCL_MIN_P2P_NCHANNELS=64 NCCL_P2P_NVL_CHUNKSIZE=131072"), LATENCY (default
#   0), LIMIT_SCALE (default 1: multiply every step's time limit).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: open_targets.sh OUT_DIR}"
mkdir -p "$out"
# shellcheck source=bench/gpu/gpu_env.sh
source "$here/gpu_env.sh"
all=$(gpu_count)
step() { timed_step "$out" "$@"; }  # name limit_s command...
nvidia-smi -L >"$out/gpus.txt" 2>&1
nvidia-smi topo -m >>"$out/gpus.txt" 2>&1
# The host's CPU: what relay adds to a small call is host time, and it
# doubles on the hosts where raw NCCL's own call takes 10 us instead of 6.
{
  lscpu | grep -E "Model name|^CPU\(s\)|Hypervisor"
  echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
  "$here/clock_cost"
} >"$out/host.txt" 2>&1
step device_reduce_test 40 "$here/device_reduce_test"
step nccl_transport_test 120 "$here/nccl_transport_test"
tail -3 "$out/nccl_transport_test.log"
step loopback_device_test 60 "$here/loopback_device_test"
tail -3 "$out/loopback_device_test.log"
for n in 2 4; do
  [ "$n" -le "$all" ] || continue
  devices=$(seq -s, 0 $((n - 1)))
  # Two rounds on 2 GPUs (about 40 s): one round at 256 MB has come out
  # 0.895 where three gave 0.93-0.94 each (bench/results/
  # 2026-11-26-ring-3rounds-h100). One on 4, to stay inside the limit.
  ring_rounds=$([ "$n" = 2 ] && echo 2 || echo 1)
  step "ring_${n}gpu" 70 env CUDA_VISIBLE_DEVICES="$devices" CHECK=0 \
    MIN_SIZE=256M DEPTHS=2 REDUCE_BLOCKS="${REDUCE_BLOCKS:-}" \
    "$here/ring_over_nccl.sh" "$out/ring_${n}gpu" "$ring_rounds"
  if [ "$n" = 4 ]; then
    step ring_4gpu_edges 70 env CUDA_VISIBLE_DEVICES="$devices" CHECK=0 \
      RELAY_NCCL_RING_EDGES=1 MIN_SIZE=256M DEPTHS=2 \
      "$here/ring_over_nccl.sh" "$out/ring_4gpu_edges" 1
  fi
  step "added_latency_${n}gpu" 20 env CUDA_VISIBLE_DEVICES="$devices" \
    "$here/added_latency" -n 1000 -e 2K -f 4 -r 20
  grep -v "^#" "$out/added_latency_${n}gpu.log"
done
step p2p_comm_collectives 60 "$here/p2p_comm_collectives.sh" "$out/p2p_comm" 2
tail -n 12 "$out/p2p_comm_collectives.log"
step p2p_by_size 50 env \
  P2P_ENVS="${P2P_ENVS-NCCL_MIN_P2P_NCHANNELS=64 NCCL_P2P_NVL_CHUNKSIZE=131072}" \
  "$here/p2p_by_size.sh" "$out/p2p"
if [ "${LATENCY:-0}" = 1 ]; then
  for n in 2 4; do
    [ "$n" -le "$all" ] || continue
    devices=$(seq -s, 0 $((n - 1)))
    variants="relay relay-own-stream relay-on-stream"
    [ -n "${BASELINE:-}" ] && variants="$variants baseline baseline-own-stream"
    step "latency_${n}gpu" 70 env CUDA_VISIBLE_DEVICES="$devices" FACTOR=4 \
      VARIANTS="$variants" "$here/nccl_latency.sh" "$out/latency_${n}gpu" 5 all_reduce
  done
fi
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
for f in "$out"/ring_*/ratio_all_reduce.md; do
  [ -f "$f" ] && { echo "== $f"; grep -E "^###|^\| [0-9]" "$f" | cut -c1-100; }
done
for f in "$out"/latency_*gpu/added_all_reduce.md; do
  [ -f "$f" ] && { echo "== $f"; grep -E "^###|largest" "$f"; }
done
cat "$out/p2p_by_size.log"
echo "packed $out.tgz"
