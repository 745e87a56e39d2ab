#!/usr/bin/env bash
# Lease (session 6, 2): an all-pairs all_reduce emulated on raw NCCL
# (neighbour_exchange's fourth table) against native all_reduce on 4 GPUs,
# two rounds. One archive back.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out"
work=/tmp/lease; rm -rf "$work"; mkdir -p "$work"
source "$here/gpu_env.sh"
export NCCL_NVLS_ENABLE=0
start=$SECONDS
{ nvidia-smi -L; lscpu | grep -E "Model name"; } > "$work/host.txt" 2>&1; cat "$work/host.txt"
for round in 1 2; do
  timeout 200 "$here/neighbour_exchange" 20 8 256 > "$work/nx$round.txt" 2> "$work/nx$round.err"
  echo "neighbour_exchange round $round rc=$? ($((SECONDS-start)) s)"
  sed -n '/all-pairs all_reduce/,$p' "$work/nx$round.txt"
done
tar czf "$out/lease.tgz" -C "$work" .
echo "== done ($((SECONDS-start)) s)"
