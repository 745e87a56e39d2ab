#!/usr/bin/env bash
# Lease: the watchdog's shortest pause between looks (RELAY_NCCL_DIAG_WATCHDOG_PAUSE_US,
# default 50 us) against relay's added latency, with no watchdog as the bound;
# alternating, twice over.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out"
source "$here/gpu_env.sh"
start=$SECONDS
{ nvidia-smi -L; lscpu | grep -E "Model name|^CPU\(s\)"; } > "$out/host.txt" 2>&1
cat "$out/host.txt"
lat=(-n 1000 -e 512 -f 8 -r 20)
for k in 1 2; do
  for v in 50 200 1000 5000 none; do
    echo "== pass $k pause $v ($((SECONDS-start)) s)"
    if [ "$v" = none ]; then
      RELAY_NCCL_DIAG_NO_WATCH=1 timeout 40 "$here/added_latency_diag" "${lat[@]}" > "$out/p${k}_$v.log" 2>&1
    else
      RELAY_NCCL_DIAG_WATCHDOG_PAUSE_US=$v timeout 40 "$here/added_latency_diag" "${lat[@]}" > "$out/p${k}_$v.log" 2>&1
    fi
    grep -v "^#" "$out/p${k}_$v.log"
  done
done
echo "== done ($((SECONDS-start)) s)"
