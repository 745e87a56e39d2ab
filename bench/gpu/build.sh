#!/usr/bin/env bash
# File: bench/gpu/build.sh
#
# Builds relay's GPU binaries on a build host (CUDA toolkit needed, no GPU)
# into one folder that can be copied to a GPU host and run there with no
# Bazel: Abseil, GoogleTest and the CUDA runtime are linked statically; the
# GPU host needs only its driver (and NCCL, for the NCCL binaries). Built
# with --define=relay_ucx=off, since GPU hosts need not have UCX's shared
# libraries.
#
# Usage: bench/gpu/build.sh [OUT_DIR]     (default gpu_bin/, git-ignored)
# Then, on the GPU host:
#   gpu_bin/device_reduce_test            # kernels vs host, bit for bit
#   gpu_bin/device_reduce -b 1M -e 1G     # kernel vs device copy bandwidth
#   NCCL_NVLS_ENABLE=0 gpu_bin/nccl_collectives -b 8 -e 1G --collective all
#                                         # raw NCCL, every visible GPU
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-gpu_bin}"
targets=(//bench:device_reduce //collectives:device_reduce_test //bench/peers:nccl_collectives)
bazel build --define=relay_ucx=off "${targets[@]}" >&2
mkdir -p "$out"
for t in "${targets[@]}"; do
  path="bazel-bin/$(sed 's|^//||; s|:|/|' <<<"$t")"
  cp -f "$path" "$out/"
  chmod u+w "$out/$(basename "$path")"
done
echo "built into $out/: $(ls "$out" | tr '\n' ' ')"
