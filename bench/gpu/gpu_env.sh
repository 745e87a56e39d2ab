# File: bench/gpu/gpu_env.sh
#
# Sourced by the GPU host scripts (run_checks.sh, compare_nccl.sh,
# loopback_on_gpus.sh, torch_vs_nccl.sh): the environment every run keeps and
# the GPU count it uses.
#   - NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and its PyTorch and
#     NVSHMEM counterparts): on shared hosts it can take the GPUs out of
#     service.
#   - gpu_count prints how many GPUs the run uses: those CUDA_VISIBLE_DEVICES
#     names, else every one nvidia-smi lists.
#   - gpu_header prints the "# date host: N x NAME" line a results folder's
#     environment.txt starts with.
#   - timed_step runs one bounded step of a lease's command
#     (loopback_on_gpus.sh, a lease's own script).
#   - lease_begin and lease_end frame a one-off lease script: a fresh work
#     folder with host.txt, and at the end one archive in the lease's OUT
#     (a lease returns at most 8 files). Example (gpu_bin/lease.sh, staged
#     with bench/gpu/stage.sh):
#       here="$(cd "$(dirname "$0")" && pwd)"; source "$here/gpu_env.sh"
#       lease_begin "$1"
#       timed_step "$work" checks 300 "$here/run_checks.sh" "$work/checks"
#       lease_end
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

gpu_count() {
  if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .
  else
    nvidia-smi -L | wc -l
  fi
}

gpu_header() {  # gpus
  echo "# $(date -u +%FT%TZ) $(hostname): $1 x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
}

# timed_step OUT_DIR NAME LIMIT_S COMMAND...: runs COMMAND with its output
# in OUT_DIR/NAME.log, cut off after LIMIT_S x LIMIT_SCALE (default 1)
# seconds, and prints "NAME: rc RC in T s (limit L s)" (rc 124: cut off).
timed_step() {
  local out="$1" name="$2" limit=$(($3 * ${LIMIT_SCALE:-1})) start=$SECONDS
  shift 3
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "$name: rc $rc in $((SECONDS - start)) s (limit $limit s)"
}

# lease_begin OUT: sets `out` (made) and `work` (a fresh /tmp/lease), writes
# the GPUs and CPU model to $work/host.txt and prints them, and starts the
# lease's clock.
lease_begin() {
  out="$1"
  mkdir -p "$out"
  work=/tmp/lease
  rm -rf "$work"
  mkdir -p "$work"
  lease_start=$SECONDS
  { nvidia-smi -L; lscpu | grep -E "Model name"; } >"$work/host.txt" 2>&1
  cat "$work/host.txt"
}

# lease_end: $work as one archive, $out/lease.tgz, and the lease's time.
lease_end() {
  tar czf "$out/lease.tgz" -C "$work" .
  echo "== done ($((SECONDS - lease_start)) s)"
}
