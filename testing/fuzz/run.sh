#!/usr/bin/env bash
# Builds relay's fuzz targets with libFuzzer (clang, ASan + UBSan) and runs
# each one, then the flight-record reader's fuzzer (Python).
#
# Usage: testing/fuzz/run.sh [--seconds S | --runs N] [--jobs J] [TARGET...]
#   --seconds S  run each target for S seconds (default 30)
#   --runs N     run each target for N inputs instead (10000000 for the
#                figure issue 5 asks for; see bench/results/*fuzz*)
#   --jobs J     libFuzzer worker processes per target (default 1); with
#                --runs, the runs are split between them
#   TARGET       store_request store_response fingerprint
#                launch_environment http_request flight_record
#                (default: all)
#   RELAY_FUZZ_WORK  where corpora grow and crashes land (default: a
#                temporary directory, removed unless something crashed)
#   RELAY_BAZEL_FLAGS extra flags for bazel build (CI: its disk cache)
#
# Prints one line per target, "PASS name: R runs in T s" or "FAIL name:
# ...", and exits non-zero if any target crashed, leaked, tripped a
# sanitizer or broke a property. The checked-in seeds
# (testing/fuzz/corpus/NAME) are copied, never modified: add an input that
# crashed a target there by hand once it is fixed, so `bazel test //...`
# replays it from then on.
set -uo pipefail
cd "$(dirname "$0")/../.."

seconds=30 runs=0 jobs=1
targets=()
while (($#)); do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
all=(store_request store_response fingerprint launch_environment http_request flight_record)
((${#targets[@]})) || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "run.sh: no target '$t' (${all[*]})" >&2; exit 2; }
done
[[ "$seconds" =~ ^[0-9]+$ && "$runs" =~ ^[0-9]+$ && "$jobs" =~ ^[1-9][0-9]*$ ]] ||
  { echo "run.sh: --seconds, --runs and --jobs take whole numbers" >&2; exit 2; }
# libFuzzer reads -max_total_time=0 as "no limit": refuse a run without one.
((seconds > 0 || runs > 0)) || { echo "run.sh: give --seconds or --runs above 0" >&2; exit 2; }

command -v clang >/dev/null || { echo "run.sh: clang is missing (tools/bootstrap.sh installs it)" >&2; exit 2; }
work="${RELAY_FUZZ_WORK:-$(mktemp -d)}"
mkdir -p "$work"

cpp=()
for t in "${targets[@]}"; do [[ "$t" != flight_record ]] && cpp+=("//testing/fuzz:${t}_fuzzer"); done
if ((${#cpp[@]})); then
  echo "run.sh: building ${cpp[*]} (--config=fuzz)"
  # gold's warnings about ASan helpers it cannot export are noise.
  # shellcheck disable=SC2086
  bazel build --config=fuzz ${RELAY_BAZEL_FLAGS:-} "${cpp[@]}" 2>&1 |
    grep -v "Cannot export local symbol"
  if ((PIPESTATUS[0] != 0)); then
    echo "FAIL build: bazel build --config=fuzz failed"
    exit 1
  fi
  bin="$(bazel info --config=fuzz bazel-bin 2>/dev/null)/testing/fuzz"
fi

failed=0
for t in "${targets[@]}"; do
  corpus="$work/corpus/$t"
  mkdir -p "$corpus" "$work/crashes/$t"
  cp -n testing/fuzz/corpus/"$t"/* "$corpus"/
  log="$work/$t.log"
  start=$(date +%s)
  if [[ "$t" == flight_record ]]; then
    # One process per job, each with its own seed and share of the runs.
    limit=(--seconds "$seconds"); ((runs)) && limit=(--runs $(((runs + jobs - 1) / jobs)))
    pids=()
    for ((j = 1; j <= jobs; j++)); do
      /usr/bin/python3 tools/relay_analyze_fuzz.py "${limit[@]}" --seed "$j" \
        --crashes "$work/crashes/$t" "$corpus" >"$log.$j" 2>&1 &
      pids+=($!)
    done
    rc=0
    for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
    cat "$log".* >"$log"; rm -f "$log".*
    done_runs=$(sed -n 's/.*: \([0-9]*\) runs in .*/\1/p' "$log" | awk '{n += $1} END {print n + 0}')
  else
    limit=(-max_total_time="$seconds"); ((runs)) && limit=(-runs=$(((runs + jobs - 1) / jobs)))
    parallel=(); ((jobs > 1)) && parallel=(-jobs="$jobs" -workers="$jobs")
    (cd "$work" && "$bin/${t}_fuzzer" "${limit[@]}" "${parallel[@]}" -print_final_stats=1 \
      -artifact_prefix="$work/crashes/$t/" "$corpus") >"$log" 2>&1
    rc=$?
    # One "stat::number_of_executed_units" per job: with -jobs libFuzzer
    # copies each job's log (fuzz-N.log) into its own output at the end.
    done_runs=$(awk '/stat::number_of_executed_units/ {n += $2} END {print n + 0}' "$log")
    rm -f "$work"/fuzz-*.log
  fi
  took=$(($(date +%s) - start))
  if ((rc == 0)); then
    echo "PASS $t: ${done_runs:-?} runs in ${took} s ($(ls "$corpus" | wc -l) inputs in corpus)"
  else
    failed=$((failed + 1))
    echo "FAIL $t: exit $rc after ${took} s; log $log, crashing input in $work/crashes/$t/"
    grep -E "ERROR|SUMMARY|property failed|Traceback|crash" "$log" | head -5 | sed 's/^/  /'
  fi
done
if ((failed == 0)) && [[ -z "${RELAY_FUZZ_WORK:-}" ]]; then rm -rf "$work"; fi
exit $((failed > 0))
