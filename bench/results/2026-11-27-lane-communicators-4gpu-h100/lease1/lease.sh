#!/usr/bin/env bash
# Lease (session 6, 1): does a communicator and transport stream per lane
# let relay's both-ways ring steps of two lanes overlap (neighbour_exchange
# both-ways vs both-lanes), and the GPU checks on the build with the shared
# env switch parser. One archive back.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out"
work=/tmp/lease; rm -rf "$work"; mkdir -p "$work"
source "$here/gpu_env.sh"
export NCCL_NVLS_ENABLE=0
start=$SECONDS
{ nvidia-smi -L; lscpu | grep -E "Model name"; } > "$work/host.txt" 2>&1; cat "$work/host.txt"
for round in 1 2; do
  timeout 200 "$here/neighbour_exchange" 20 8 128 > "$work/nx$round.txt" 2> "$work/nx$round.err"
  echo "neighbour_exchange round $round rc=$? ($((SECONDS-start)) s)"
  sed -n '/ring-like: 2 lanes/,/^$/p' "$work/nx$round.txt"
done
timeout 300 "$here/run_checks.sh" "$work/checks" > "$work/checks.log" 2>&1
echo "checks rc=$? ($((SECONDS-start)) s)"; grep -E "PASS|FAIL|failed" "$work/checks.log" | tail -12
tar czf "$out/lease.tgz" -C "$work" .
echo "== done ($((SECONDS-start)) s)"
