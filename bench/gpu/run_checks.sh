#!/usr/bin/env bash
# File: bench/gpu/run_checks.sh
#
# The GPU correctness checks, on a GPU host, from the folder bench/gpu/build.sh
# filled: the device kernels against the host ones, the NCCL transport's
# and cuda_ipc transports' tests with one process for every GPU (threads),
# cuda_ipc's collectives and conformance suite with a process per GPU, the
# overlap example
# (examples/overlap_streams), and the conformance suite
# over NCCL with one process per GPU under relayrun, for 2 GPUs and for all
# of them. Logs go to OUT_DIR; the last line says how many checks failed.
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
check() {  # name, command...
  local name="$1"; shift
  local start=$SECONDS
  if "$@" >"$out/$name.log" 2>&1; then
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
# cuda_ipc with ranks as processes (IPC handles between processes): every
# size's result checked.
for c in all_reduce all_gather reduce_scatter all_to_all broadcast; do
  check "cuda_ipc_processes_$c" python3 "$here/relayrun" -n "$gpus" --no-prefix \
    --timeout 600 -- "$here/collectives" --transport cuda_ipc --collective "$c" \
    -b 8 -e 256M -f 4 -n 5 -w 2 -c 1
done
# The conformance suite over cuda_ipc with a process per GPU (native
# collectives and relay's algorithms over its point-to-point).
check conformance_cuda_ipc_processes python3 "$here/relayrun" -n "$gpus" \
  --transport cuda_ipc --timeout 600 -- "$here/conformance_rank" --timeout 60
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
