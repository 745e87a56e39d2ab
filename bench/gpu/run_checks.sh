#!/usr/bin/env bash
# File: bench/gpu/run_checks.sh
#
# The GPU correctness checks, on a GPU host, from the folder bench/gpu/build.sh
# filled: the device kernels against the host ones, the NCCL transport's
# and cuda_ipc transports' tests with one process for every GPU (threads),
# cuda_ipc's collectives, windows, conformance suite (on every protocol)
# and SIGKILL of a rank, with a process per GPU, the overlap example
# (examples/overlap_streams), and the conformance suite over NCCL with one
# process per GPU under relayrun, for 2 GPUs and for all of them. On a host
# with one GPU, cuda_ipc's process checks run two processes on it
# (RELAY_CUDA_IPC_SHARED_GPU=1): their kernels take turns on the GPU, so a
# call takes 2-3 ms, but every path between processes runs. Logs go to
# OUT_DIR; the last line says how many checks failed. A check that runs
# past CHECK_LIMIT seconds (default 300) fails with exit status 124.
#
# Usage: run_checks.sh OUT_DIR
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: run_checks.sh OUT_DIR}"
mkdir -p "$out"
# shellcheck source=bench/gpu/gpu_env.sh
source "$here/gpu_env.sh"
gpus=$(gpu_count)
failed=0
# Each check gets at most CHECK_LIMIT seconds (default 300), so one that
# hangs fails alone instead of taking the device call with it (shell
# functions bound themselves).
check() {  # name, command...
  local name="$1"; shift
  local start=$SECONDS
  local limit=()
  declare -F "$1" >/dev/null || limit=(timeout "${CHECK_LIMIT:-300}")
  if "${limit[@]}" "$@" >"$out/$name.log" 2>&1; then
    echo "PASS $name ($((SECONDS - start)) s)"
  else
    echo "FAIL $name ($((SECONDS - start)) s): tail of $out/$name.log:"
    tail -n 15 "$out/$name.log"
    failed=$((failed + 1))
  fi
}
check device_reduce_test "$here/device_reduce_test"
check device_watch_test "$here/device_watch_test"
check nccl_transport_test "$here/nccl_transport_test"
check loopback_device_test "$here/loopback_device_test"
check ipc_kernels_test "$here/ipc_kernels_test"
check allocations_test "$here/allocations_test"
check windows_test "$here/windows_test"
check cuda_ipc_transport_test "$here/cuda_ipc_transport_test"
# cuda_ipc with ranks as processes (IPC handles between processes), one per
# GPU or two sharing a lone GPU: every size's result checked.
ipc_ranks=$gpus
if [ "$gpus" = 1 ]; then
  ipc_ranks=2
  export RELAY_CUDA_IPC_SHARED_GPU=1
fi
# The transport's tests (written for 2 ranks as threads) run whole on 2
# processes (testing/rank_harness.h).
check cuda_ipc_transport_test_processes python3 "$here/relayrun" -n 2 --timeout 300 -- \
  "$here/cuda_ipc_transport_test"
for c in all_reduce all_gather reduce_scatter all_to_all broadcast; do
  check "cuda_ipc_processes_$c" python3 "$here/relayrun" -n "$ipc_ranks" --no-prefix \
    --timeout 600 -- "$here/collectives" --transport cuda_ipc --collective "$c" \
    -b 8 -e 256M -f 4 -n 5 -w 2 -c 1
done
# On the caller's stream (StreamOrder::kOnStream); the harness's barriers
# between rows go after the stream, so the transport switches streams both
# ways.
for c in all_reduce all_gather reduce_scatter all_to_all broadcast; do
  check "cuda_ipc_processes_on_stream_$c" python3 "$here/relayrun" -n "$ipc_ranks" \
    --no-prefix --timeout 600 -- "$here/collectives" --transport cuda_ipc \
    --collective "$c" --cuda-stream own --stream-order on -b 8 -e 64M -f 8 -n 5 -w 2 -c 1
done
# Captured into CUDA graphs and replayed (each row's check replays a graph
# of one call after copying new data in).
for c in all_reduce all_gather reduce_scatter; do
  check "cuda_ipc_processes_graph_$c" python3 "$here/relayrun" -n "$ipc_ranks" \
    --no-prefix --timeout 600 -- "$here/collectives" --transport cuda_ipc \
    --collective "$c" --api graph -b 8 -e 64M -f 8 -n 5 -w 1 -c 1
done
# Into windows (registered outputs), in pieces from 64 MiB.
for c in all_reduce all_gather; do
  check "cuda_ipc_processes_window_$c" python3 "$here/relayrun" -n "$ipc_ranks" \
    --no-prefix --timeout 600 -- "$here/collectives" --transport cuda_ipc \
    --collective "$c" --window 1 -b 32M -e 256M -f 2 -n 3 -w 1 -c 1
done
# The conformance suite over cuda_ipc (native collectives and relay's
# algorithms over its point-to-point), by default and on each protocol
# forced: pieces through a 1 MiB arena, the 128-byte lines, two-shot on
# words, two-shot at every size.
for variant in default pieces:RELAY_CUDA_IPC_ARENA_BYTES=1048576 \
    lines:RELAY_CUDA_IPC_LINES_BYTES=3932160 \
    two_shot_words:RELAY_CUDA_IPC_LOW_LATENCY_BYTES=0,RELAY_CUDA_IPC_TWO_SHOT_WORDS_BYTES=1048576 \
    two_shot:RELAY_CUDA_IPC_ONE_SHOT_BYTES=0; do
  settings=()
  [ "$variant" = default ] || IFS=, read -r -a settings <<<"${variant#*:}"
  check "conformance_cuda_ipc_processes_${variant%%:*}" env "${settings[@]}" \
    python3 "$here/relayrun" -n "$ipc_ranks" --transport cuda_ipc --timeout 600 -- \
    "$here/conformance_rank" --timeout 60
done
# SIGKILL of each rank mid-all_reduce on the flag path (262144 floats), the
# words (64) and the lines (131072, with the lines on): the survivor must
# fail within its timeout plus 1 s and its GPU stay usable (fault_rank
# says so only then).
survives_kill() {  # count victim lines_bytes
  local log
  # relayrun fails for the victim's SIGKILL; the survivor's line decides.
  log=$(timeout 60 env RELAY_TRANSPORT=cuda_ipc RELAY_CUDA_IPC_LINES_BYTES="$3" \
    python3 "$here/relayrun" -n 2 --keep-going -- "$here/fault_rank" --victim "$2" \
    --device 1 --count "$1" --timeout 3 2>&1)
  echo "$log"
  grep -q "GPU usable after the failure" <<<"$log"
}
for n in 262144 64 131072; do
  lines=0
  [ "$n" = 131072 ] && lines=3932160
  for v in 0 1; do
    check "cuda_ipc_kill_${n}_$v" survives_kill "$n" "$v" "$lines"
  done
done
# A rank frees a registered window: each call into windows is refused on
# every rank, in time, and nothing lands in the others' windows
# (all_reduce in pieces through a 32 MiB arena).
for c in all_gather all_reduce; do
  check "cuda_ipc_window_freed_$c" env RELAY_CUDA_IPC_ARENA_BYTES=33554432 \
    python3 "$here/relayrun" -n "$ipc_ranks" --transport cuda_ipc --timeout 120 -- \
    "$here/window_freed_rank" --collective "$c"
done
unset RELAY_CUDA_IPC_SHARED_GPU
# The overlap example on every GPU: the values checked after every
# step, with no device-wide synchronize.
check overlap_streams "$here/overlap_streams" --steps 20
for n in 2 "$gpus"; do
  [ "$n" -ge 2 ] && [ "$n" -le "$gpus" ] || continue
  check "conformance_processes_$n" python3 "$here/relayrun" -n "$n" \
    --transport nccl --timeout 600 -- "$here/conformance_rank" --timeout 60
  [ "$n" = "$gpus" ] && break
done
echo "$gpus GPUs: $failed failed"
exit $((failed > 0))
