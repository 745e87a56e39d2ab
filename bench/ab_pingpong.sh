#!/usr/bin/env bash
# File: bench/ab_pingpong.sh
#
# Compares builds (or settings) of bench/pingpong over UCX on one message
# size, in alternating rounds, and prints each one's median half round
# trip. The point-to-point counterpart of ab_latency.sh: on the 2-core
# build VMs a 32 KB round trip swings 20% between minutes, so builds timed
# minutes apart compare the host, not the code.
#
# Usage: bench/ab_pingpong.sh [--rounds R] [--bytes B] [--iters I] [--pattern P]
#                             [--switches] SPEC SPEC...
#   SPEC            NAME=BIN[,VAR=VALUE...][,-FLAG[=VALUE]...]: a
#                   pingpong build, the environment to run it with, and
#                   flags of its own (two processes under tools/relayrun,
#                   UCX_TLS as set, else shm,self), e.g.
#                   sysv=bazel-bin/bench/pingpong,--memory=sysv
#                   RELAYRUN=PATH among the VARs picks the launcher
#                   (default tools/relayrun), e.g. an older copy of it
#   --rounds R      alternating rounds (default 10); every other round
#                   runs the SPECs in reverse order
#   --bytes B       message size (default 32K)
#   --iters I       round trips per run (default 40000; pingpong moves at
#                   most about 1 GB per size)
#   --pattern P     pingpong's --pattern (blocking or perftest), passed to
#                   every build (which must know the flag); default: none,
#                   each build's own default
#   --switches      also count context switches per run (perf stat)
#   A SPEC of NAME=perftest runs `ucx_perftest -t tag_lat` (server and
#   client, same size, round trips and UCX_TLS) as that side instead: the
#   multi-process issue's latency reference, timed in the same rounds.
#
# Besides each side's median, prints each side's median difference from
# the first SPEC within the same round (the VM moves both sides of a round
# together), with a 95% bootstrap interval of that median
# (bench/relaybench), and each side's difference from a perftest side
# the same way.
#
# Example (what the progress thread costs):
#   bazel build -c opt //bench:pingpong
#   bench/ab_pingpong.sh --switches thread=bazel-bin/bench/pingpong \
#     nothread=bazel-bin/bench/pingpong,RELAY_UCX_PROGRESS_THREAD=0
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=10 bytes=32K iters=40000 switches=0 pattern=()
usage() { sed -n '/^# Usage:/,/^# Example/p' "$0" | sed 's/^# \{0,1\}//; $d'; }
specs=()
while (($#)); do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --bytes) bytes="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    --switches) switches=1; shift ;;
    --pattern) pattern=(--pattern "$2"); shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "ab_pingpong.sh: unknown flag $1" >&2; usage >&2; exit 2 ;;
    *=*) specs+=("$1"); shift ;;
    *) echo "ab_pingpong.sh: expected NAME=BIN[,VAR=VALUE...][,-FLAG[=VALUE]...], got $1" >&2; exit 2 ;;
  esac
done
((${#specs[@]} >= 1)) || { usage >&2; exit 2; }
if ((switches)) && ! command -v perf >/dev/null; then
  echo "ab_pingpong.sh: --switches needs perf (linux-perf)" >&2; exit 2
fi
for spec in "${specs[@]}"; do
  bin="${spec#*=}"; bin="${bin%%,*}"
  if [[ $bin == perftest ]]; then
    command -v ucx_perftest >/dev/null || { echo "ab_pingpong.sh: ucx_perftest not found (tools/bootstrap.sh installs ucx-utils)" >&2; exit 2; }
    continue
  fi
  [[ -x "$bin" ]] || { echo "ab_pingpong.sh: $bin is not an executable" >&2; exit 2; }
done
# shellcheck source=bench/ucx_perftest_lib.sh
source bench/ucx_perftest_lib.sh  # From the repository root (cd above).
to_bytes() {  # 32K -> 32768
  local v="$1" m=1
  case "$v" in
    *K) m=1024; v="${v%K}" ;; *M) m=1048576; v="${v%M}" ;; *G) m=1073741824; v="${v%G}" ;;
  esac
  echo $((v * m))
}
# The round trips pingpong makes of `iters` at this size: it moves at most
# about 1 GB per size (bench/pingpong.cc), and perftest is given as many.
size_bytes="$(to_bytes "$bytes")"
round_trips="$(pingpong_round_trips "$size_bytes" "$iters")"
export UCX_TLS="${UCX_TLS:-shm,self}"

results="$(mktemp)"
trap 'rm -f "$results"' EXIT
# Every other round runs the sides in reverse order, so no side always runs
# right after another (a process's exit can still be settling when the next
# starts) or always first.
reversed=()
for ((i = ${#specs[@]} - 1; i >= 0; --i)); do reversed+=("${specs[i]}"); done
for ((round = 1; round <= rounds; ++round)); do
  order=("${specs[@]}")
  ((round % 2 == 0)) && order=("${reversed[@]}")
  for spec in "${order[@]}"; do
    name="${spec%%=*}" rest="${spec#*=}"
    bin="${rest%%,*}" items=() envs=() args=() launcher=tools/relayrun
    [[ $rest == *,* ]] && IFS=',' read -r -a items <<< "${rest#*,}"
    for item in "${items[@]}"; do
      if [[ $item == -* ]]; then
        args+=("${item%%=*}"); [[ $item == *=* ]] && args+=("${item#*=}")
      elif [[ $item == RELAYRUN=* ]]; then
        launcher="${item#RELAYRUN=}"
      else
        envs+=("$item")
      fi
    done
    run=(env "${envs[@]}" "$launcher" -n 2 --no-prefix -- "$bin"
         -b "$bytes" -e "$bytes" -n "$iters" "${pattern[@]}" "${args[@]}")
    if [[ $bin == perftest ]]; then
      out=""
      latency="$(for e in "${envs[@]}"; do export "$e"; done
                 perftest_run tag_lat "$size_bytes" "$round_trips" | awk '{print $1}')"
    else
      if ((switches)); then
        out="$(perf stat -x, -e context-switches -- "${run[@]}" 2>&1)"
      else
        out="$("${run[@]}" 2>&1)"
      fi
      latency="$(awk '!/^#/ && NF == 3 {print $2}' <<< "$out")"
    fi
    if [[ -z $latency ]]; then
      kept="$(mktemp /tmp/ab_pingpong.XXXXXX)"
      cp "$results" "$kept"
      echo "ab_pingpong.sh: $name failed in round $round:" >&2
      echo "$out" >&2
      echo "ab_pingpong.sh: the rounds before it (NAME LATENCY SWITCHES lines) are in $kept" >&2
      exit 1
    fi
    cs="$(awk -F, '/context-switches/ {print $1}' <<< "$out")"
    echo "$name $latency ${cs:--}" >> "$results"
  done
  echo "round $round of $rounds done" >&2
done
echo "# $UCX_TLS, $bytes, $iters round trips a run, $rounds alternating rounds"
PYTHONPATH=bench python3 - "$results" <<'EOF'
import collections, statistics, sys
from relaybench.stats import median_interval as interval
lat, cs, order = collections.defaultdict(list), collections.defaultdict(list), []
for line in open(sys.argv[1]):
    name, value, switches = line.split()
    if name not in order:
        order.append(name)
    lat[name].append(float(value))
    if switches != "-":
        cs[name].append(int(switches))
for name in order:
    row = f"{name:>12}  median {statistics.median(lat[name]):6.2f} us  min {min(lat[name]):6.2f}"
    if cs[name]:
        row += f"  context switches (median) {statistics.median(cs[name]):7.0f}"
    print(row + "  rounds: " + " ".join(f"{v:.2f}" for v in lat[name]))
first = order[0]
for name in order[1:]:
    d = [a - b for a, b in zip(lat[name], lat[first])]
    low, high = interval(d)
    print(f"{name:>12} - {first}, paired by round: median {statistics.median(d):+.2f} us"
          f" (95%: {low:+.2f} to {high:+.2f})"
          "  rounds: " + " ".join(f"{v:+.2f}" for v in d))
if "perftest" in lat:
    for name in order:
        if name == "perftest":
            continue
        d = [a - b for a, b in zip(lat[name], lat["perftest"])]
        low, high = interval(d)
        print(f"{name:>12} - perftest, paired by round: median {statistics.median(d):+.2f} us"
              f" (95%: {low:+.2f} to {high:+.2f})")
EOF
