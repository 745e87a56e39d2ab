#!/usr/bin/env bash
# File: bench/gpu/build.sh
#
# Builds relay's GPU binaries on a build host (CUDA toolkit needed, no GPU)
# into one folder that can be copied to a GPU host and run there with no
# Bazel: Abseil, libcrypto (--define=relay_static_deps=on), GoogleTest and
# the CUDA runtime are linked statically; the
# GPU host needs only its driver, NCCL and Python 3 (for relayrun). Built
# with --define=relay_ucx=off, since GPU hosts need not have UCX's shared
# libraries.
#
# Usage: bench/gpu/build.sh [OUT_DIR]     (default gpu_bin/, git-ignored)
# Then, on the GPU host (see bench/gpu/run_checks.sh and compare_nccl.sh,
# which the folder also holds):
#   gpu_bin/run_checks.sh OUT             # GPU tests and conformance
#   gpu_bin/compare_nccl.sh OUT           # relay's NCCL transport vs raw NCCL
#   gpu_bin/torch_vs_nccl.sh OUT          # torch backend "relay" vs "nccl"
# The folder holds about 88 MB, 16 of them the torch extension's sources,
# more than a device lease carries (64 MiB with the tree, or the lease
# is refused): bench/gpu/stage.sh copies the files a lease needs, stripped,
# into a folder to carry, and with --xz packs them to about an eighth.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-gpu_bin}"
targets=(
  //bench:added_latency
  //bench:collectives
  //bench:device_reduce
  //bench:launch_cost
  //bench:peer_copy
  //bench/peers:nccl_collectives
  //collectives:device_reduce_test
  //runtime:device_watch_test
  //examples:overlap_streams
  //testing:conformance_rank
  //testing:fault_rank
  //testing:window_freed_rank
  //transports/loopback:loopback_device_test
  //transports/nccl:nccl_transport_test
  //transports/cuda_ipc:cuda_ipc_transport_test
  //transports/cuda_ipc:ipc_kernels_test
  //transports/cuda_ipc:allocations_test
  //transports/cuda_ipc:windows_test
)
mkdir -p "$out"
bazel build --define=relay_ucx=off --define=relay_static_deps=on "${targets[@]}" >&2
for t in "${targets[@]}"; do
  path="bazel-bin/$(sed 's|^//||; s|:|/|' <<<"$t")"
  cp -f "$path" "$out/"
  chmod u+w "$out/$(basename "$path")"
done
cp -f tools/relayrun bench/gpu/gpu_env.sh bench/gpu/run_checks.sh bench/gpu/compare_nccl.sh \
  bench/gpu/cuda_ipc_2gpu.sh \
  bench/gpu/loopback_on_gpus.sh \
  bench/gpu/torch_vs_nccl.sh bench/gpu/torch_symm_mem.py bench/torch_allreduce.py examples/ddp_train.py \
  embed/torch/backend_cuda_test.py "$out/"
rm -rf "$out/relaybench"
mkdir -p "$out/relaybench"
cp -f bench/relaybench/*.py "$out/relaybench/"
rm -f "$out/relaybench/relaybench_test.py"
# What rounds.txt names as the commit on a host without the repository.
git describe --always --dirty --abbrev=7 > "$out/relaybench/COMMIT" 2>/dev/null || true
# The torch extension is compiled on the GPU host against its torch.
embed/torch/pack_for_host.sh "$out/torch"
echo "built into $out/: $(ls "$out" | tr '\n' ' ')"
