#!/usr/bin/env bash
# Lease: why relay adds 2+ us a call on some GPU hosts and under 1 on
# others. Host facts (clocksource, CPU), clock read costs, then
# added_latency plain, profiled (Launch's parts) and without the watchdog.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out"
source "$here/gpu_env.sh"
start=$SECONDS
{
  nvidia-smi -L
  echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
  echo "available: $(cat /sys/devices/system/clocksource/clocksource0/available_clocksource)"
  lscpu | grep -E "Model name|^CPU\(s\)|Thread|MHz|Hypervisor|NUMA node\(s\)"
  grep -m1 -o -E "constant_tsc|nonstop_tsc" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
  dmesg 2>/dev/null | grep -i -E "clocksource|tsc" | tail -8
  command -v perf strace || true
} > "$out/host.txt" 2>&1
cat "$out/host.txt"
echo "== clock_cost ($((SECONDS-start)) s)"
timeout 60 "$here/clock_cost" | tee "$out/clock_cost.txt"
lat=(-n 1000 -e 2K -f 4 -r 20)
for k in 1 2; do
  echo "== added_latency run $k ($((SECONDS-start)) s)"
  timeout 40 "$here/added_latency" "${lat[@]}" 2>&1 | tee "$out/added_latency_$k.log" | grep -v "^#"
done
echo "== profiled ($((SECONDS-start)) s)"
RELAY_NCCL_DIAG_PROFILE=1 timeout 40 "$here/added_latency_diag" "${lat[@]}" > "$out/profile.log" 2>&1
grep -v "^#" "$out/profile.log" | tail -30
echo "== no watchdog ($((SECONDS-start)) s)"
RELAY_NCCL_DIAG_NO_WATCH=1 timeout 40 "$here/added_latency_diag" "${lat[@]}" 2>&1 | tee "$out/no_watch.log" | grep -v "^#"
echo "== done ($((SECONDS-start)) s)"
