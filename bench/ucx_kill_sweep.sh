#!/usr/bin/env bash
# Kill recovery over UCX: RUNS jobs of 4 to 8 processes over
# UCX, each looping over all_reduces with a 60 s timeout, one seeded rank
# (any rank, the store's host included) SIGKILLed at a seeded all_reduce.
# A run passes when relayrun exits 137 naming the dead rank and every
# survivor reports UNAVAILABLE within WITHIN seconds of starting to wait on
# the all_reduce the victim died in (testing/fault_rank checks its own
# time; the wait starts at or before the death, so this over-counts).
#
# Usage: bench/ucx_kill_sweep.sh [--runs N] [--seed S] [--within SECONDS]
#            [--tls UCX_TLS] [--peer-timeout SECONDS] [--ranks MIN-MAX]
#   defaults: --runs 100 --seed 1 --within 2 --tls shm,self
#             --peer-timeout 1 (RELAY_PEER_TIMEOUT) --ranks 4-8
# Needs bazel-bin/testing/fault_rank (bazel build -c opt //testing:fault_rank).
# Prints one line per run and a summary; exits 1 if any run failed.
set -uo pipefail
cd "$(dirname "$0")/.."

runs=100 seed=1 within=2 tls=shm,self peer_timeout=1 min_ranks=4 max_ranks=8
while (($#)); do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --within) within="$2"; shift 2 ;;
    --tls) tls="$2"; shift 2 ;;
    --peer-timeout) peer_timeout="$2"; shift 2 ;;
    --ranks) min_ranks="${2%-*}"; max_ranks="${2#*-}"; shift 2 ;;
    -h|--help) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "ucx_kill_sweep: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
bin=bazel-bin/testing/fault_rank
[[ -x "$bin" ]] || { echo "ucx_kill_sweep: build $bin first (bazel build -c opt //testing:fault_rank)" >&2; exit 2; }

RANDOM=$seed
passed=0 failed=0 slowest=0
for ((i = 1; i <= runs; i++)); do
  n=$((min_ranks + RANDOM % (max_ranks - min_ranks + 1)))
  victim=$((RANDOM % n))
  after=$((RANDOM % 30))
  start=$SECONDS
  out="$(UCX_TLS=$tls RELAY_PEER_TIMEOUT=$peer_timeout tools/relayrun -n "$n" --keep-going --timeout 120 -- \
    "$bin" --victim "$victim" --after "$after" --timeout 60 --within "$within" 2>&1)"
  rc=$?
  why=""
  [[ $rc == 137 ]] || why+=" relayrun exited $rc, not 137;"
  grep -q "relayrun: rank $victim was killed by SIGKILL" <<<"$out" || why+=" relayrun did not name rank $victim;"
  times="$(grep -oE "^\[[0-9]+\] rank [0-9]+: all_reduce #[0-9]+ failed after [0-9.]+ s: UNAVAILABLE" <<<"$out" |
    sed -E 's/.*failed after ([0-9.]+) s.*/\1/')"
  reported=$(grep -c . <<<"$times")
  [[ -n "$times" ]] || reported=0
  ((reported == n - 1)) || why+=" $reported of $((n - 1)) survivors reported UNAVAILABLE;"
  worst=$(sort -g <<<"$times" | tail -1)
  worst=${worst:-0}
  late=$(awk -v w="$worst" -v lim="$within" 'BEGIN {print (w > lim)}')
  ((late)) && why+=" a survivor took ${worst} s;"
  slowest=$(awk -v a="$slowest" -v b="$worst" 'BEGIN {print (b > a ? b : a)}')
  if [[ -z "$why" ]]; then
    passed=$((passed + 1))
    echo "run $i: ok: $n ranks, rank $victim killed in all_reduce #$after; slowest survivor ${worst} s ($((SECONDS - start)) s)"
  else
    failed=$((failed + 1))
    echo "run $i: FAIL: $n ranks, rank $victim killed in all_reduce #$after:$why"
    sed 's/^/    /' <<<"$out" | tail -n 12
  fi
done
echo "ucx_kill_sweep: $passed/$runs runs passed (UCX_TLS=$tls, RELAY_PEER_TIMEOUT=$peer_timeout, $min_ranks-$max_ranks ranks, within $within s); slowest survivor ${slowest} s"
((failed == 0))
