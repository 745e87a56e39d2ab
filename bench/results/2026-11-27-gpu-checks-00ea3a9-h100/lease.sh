#!/usr/bin/env bash
# Lease (session 6, 5): the GPU checks on the session's last code (counts
# read by runtime/env_var.h, RELAY_STREAM_REDUCE_BLOCKS included). One
# archive back.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out"
work=/tmp/lease; rm -rf "$work"; mkdir -p "$work"
source "$here/gpu_env.sh"
export NCCL_NVLS_ENABLE=0
start=$SECONDS
{ nvidia-smi -L; lscpu | grep -E "Model name"; } > "$work/host.txt" 2>&1; cat "$work/host.txt"
timeout 300 "$here/run_checks.sh" "$work/checks" > "$work/checks.log" 2>&1
echo "checks rc=$? ($((SECONDS-start)) s)"; grep -E "PASS|FAIL|failed" "$work/checks.log" | tail -12
# RELAY_STREAM_REDUCE_BLOCKS through ReadEnvCount: a count runs relay's ring
# on device buffers (checked), a malformed one fails naming the variable.
for v in 16 lots; do
  RELAY_STREAM_REDUCE_BLOCKS=$v timeout 120 "$here/collectives" --transport nccl --ranks 2 \
    --algorithm ring --collective all_reduce -b 1M -e 16M -f 4 -n 5 -w 1 -c 1 \
    > "$work/reduce_blocks_$v.txt" 2>&1
  echo "RELAY_STREAM_REDUCE_BLOCKS=$v rc=$?"
  grep -E "^ +[0-9]+ |REDUCE_BLOCKS|rror" "$work/reduce_blocks_$v.txt" | head -4
done
tar czf "$out/lease.tgz" -C "$work" .
echo "== done ($((SECONDS-start)) s)"
