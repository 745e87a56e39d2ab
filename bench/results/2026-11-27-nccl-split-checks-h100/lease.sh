#!/usr/bin/env bash
# Lease (session 6, 3): the NCCL transport split into nccl_core, nccl_comms
# and nccl_transport: the GPU checks on 4 GPUs; the diagnostic build once;
# native collectives against raw NCCL on 2 GPUs from 32 MB, 3 rounds (the
# 2-GPU record had one all_gather row at 0.983). One archive back.
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
RELAY_NCCL_DIAG_PROFILE=1 timeout 60 "$here/collectives_diag" -b 8 -e 64K -f 8 -n 200 -w 20 \
  --transport nccl --ranks 2 --collective all_reduce > "$work/diag.txt" 2>&1
echo "diag rc=$? ($((SECONDS-start)) s)"; grep -E "launch profile|^ +8 " "$work/diag.txt" | head -4
CUDA_VISIBLE_DEVICES=0,1 MIN_SIZE=32M STREAMS=default RING=0 timeout 400 \
  "$here/compare_nccl.sh" "$work/native2" 1G 3 > "$work/native2.log" 2>&1
echo "native 2 GPUs rc=$? ($((SECONDS-start)) s)"
cat "$work"/native2/ratio_*.md 2>/dev/null | grep -v "^$" | head -40
tar czf "$out/lease.tgz" -C "$work" .
echo "== done ($((SECONDS-start)) s)"
