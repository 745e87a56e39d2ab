#!/usr/bin/env bash
# File: bench/ab_latency.sh
#
# Compares two or more builds of bench/collectives on one collective and
# size, in alternating rounds, and prints each build's median time. For
# before/after figures on a noisy machine: the 2-core build VMs swing 2-4x
# between minutes (host contention), so single runs of two builds taken
# minutes apart compare the host, not the code.
#
# Usage: bench/ab_latency.sh [--ranks N] [--rounds R] [--bytes B] [--iters I]
#                            [--collective C] [--algorithm A]
#                            [--transport T] BIN BIN...
#   --ranks N       ranks (default 2): threads on loopback, processes
#                   started by tools/relayrun on ucx
#   --transport T   loopback (default) or ucx (UCX_TLS as set, else
#                   shm,self)
#   --rounds R      alternating rounds (default 5); each round runs every
#                   BIN once and yields its out-of-place and in-place times
#   --bytes B       message size, as bench/collectives takes it (default 8)
#   --iters I       timed calls per run (default 20000)
#   --collective C  default all_reduce
#   --algorithm A   default: each build's own choice
#   BIN may be PATH@ALGORITHM: that build, forced to that algorithm (so one
#   build's algorithms can be compared: BIN@ring BIN@direct)
#   BIN may end in +blocking: that build timed through its blocking calls
#   (bench/collectives --api blocking: Communicator::RunCollective), so
#   BIN BIN+blocking compares the two forms of one build
#   BIN may be `mpi`: Open MPI's MPI collective on as many processes,
#   timed the same way (bench/peers/mpi_collectives under mpirun; MPI_BIN
#   names another build of it), or `mpi@K` with
#   coll_tuned_allreduce_algorithm K (all_reduce; 0 = its default rules)
#
# Besides each side's median, prints each side's median ratio to the first
# BIN within the same round: the VM's phase moves both sides of a round
# together, so the paired ratio is steadier than a ratio of medians.
#
# Example (the build before a change against the current one):
#   git stash; bazel build //bench:collectives; cp bazel-bin/bench/collectives /tmp/before
#   git stash pop; bazel build //bench:collectives
#   bench/ab_latency.sh --ranks 2 /tmp/before bazel-bin/bench/collectives
#   bench/ab_latency.sh --rounds 10 --bytes 256 bazel-bin/bench/collectives mpi
set -euo pipefail

ranks=2 rounds=5 bytes=8 iters=20000 collective=all_reduce algorithm=""
transport=loopback
usage() { sed -n '/^# Usage:/,/^# Example/p' "$0" | sed 's/^# \{0,1\}//; $d'; }
bins=()
while (($#)); do
  case "$1" in
    --ranks) ranks="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --bytes) bytes="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    --collective) collective="$2"; shift 2 ;;
    --algorithm) algorithm="$2"; shift 2 ;;
    --transport) transport="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "ab_latency.sh: unknown flag $1" >&2; usage >&2; exit 2 ;;
    *) bins+=("$1"); shift ;;
  esac
done
if ((${#bins[@]} < 1)); then usage >&2; exit 2; fi
launch=()
case "$transport" in
  loopback) ;;
  ucx)
    export UCX_TLS="${UCX_TLS:-shm,self}"
    launch=("$(dirname "$0")/../tools/relayrun" -n "$ranks" --no-prefix --) ;;
  *) echo "ab_latency.sh: --transport is loopback or ucx, not $transport" >&2; exit 2 ;;
esac
mpi_bin="${MPI_BIN:-bazel-bin/bench/peers/mpi_collectives}"
for b in "${bins[@]}"; do
  b="${b%+blocking}"
  if [[ "${b%@*}" == mpi ]]; then
    if [[ "$b" == *@* && $collective != all_reduce ]]; then
      echo "ab_latency.sh: $b sets Open MPI's all_reduce algorithm; --collective is $collective" >&2; exit 2
    fi
    if [[ -z "${MPI_BIN:-}" ]]; then
      bazel build -c opt //bench/peers:mpi_collectives >&2 || exit 1
    fi
    [[ -x "$mpi_bin" ]] || { echo "ab_latency.sh: $mpi_bin is not an executable" >&2; exit 2; }
    continue
  fi
  [[ -x "${b%@*}" ]] || { echo "ab_latency.sh: ${b%@*} is not an executable" >&2; exit 2; }
done

json="$(mktemp /tmp/ab_latency.XXXXXX.json)"
trap 'rm -f "$json"' EXIT
declare -A times best
for ((r = 1; r <= rounds; r++)); do
  for b in "${bins[@]}"; do
    side="${b%+blocking}" api=()
    [[ "$side" != "$b" ]] && api=(--api blocking)
    bin="${side%@*}" alg="$algorithm"
    [[ "$side" == *@* ]] && alg="${side##*@}"
    if [[ "$bin" == mpi ]]; then
      mca=()
      [[ "$b" == *@* ]] && mca=(--mca coll_tuned_use_dynamic_rules 1
                               --mca coll_tuned_allreduce_algorithm "$alg")
      out="$(mpirun --allow-run-as-root --oversubscribe -np "$ranks" "${mca[@]}" \
        "$mpi_bin" --collective "$collective" -b "$bytes" -e "$bytes" \
        -n "$iters" -w "$((iters / 10 + 1))" -c 0 --json "$json" 2>/dev/null)" || {
        echo "ab_latency.sh: $b failed" >&2; exit 1; }
    else
      out="$("${launch[@]}" "$bin" --collective "$collective" \
        --transport "$transport" $([[ $transport == loopback ]] && echo --ranks "$ranks") \
        -b "$bytes" -e "$bytes" -n "$iters" -w "$((iters / 10 + 1))" \
        ${alg:+--algorithm "$alg"} "${api[@]}" --json "$json")" || {
        echo "ab_latency.sh: $b failed" >&2; exit 1; }
    fi
    # The times from the JSON rows, not the printed columns: those round to
    # 0.01 us, 3% of a 0.3 us call, as large as the effects compared here.
    # Out of place, then in place unless the collective has no in-place
    # form (all_to_all, barrier: null there).
    row="$(python3 - "$json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
# bench/collectives writes {"runs": [report, ...]}, the MPI harness one report.
row = report.get("runs", [report])[0]["rows"][0]
print(" ".join(f"{r['time_us']:.4f}"
               for r in (row["out_of_place"], row["in_place"]) if r))
PY
)" || { echo "ab_latency.sh: $b wrote no JSON row" >&2; exit 1; }
    times[$b]+="$row "
    # The round's better of out of place and in place, for the paired ratio.
    best[$b]+="$(tr ' ' '\n' <<<"$row" | sort -g | head -1) "
  done
  echo "round $r/$rounds done" >&2
done
echo "# $collective, $bytes B, $ranks ranks ($transport), $rounds rounds x $iters calls${algorithm:+, algorithm $algorithm}"
for b in "${bins[@]}"; do
  printf '%s: median %s us (all: %s)\n' "$b" \
    "$(tr ' ' '\n' <<<"${times[$b]}" | grep . | sort -g |
       awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')" "${times[$b]}"
done
first="${bins[0]}"
for b in "${bins[@]:1}"; do
  # Each round's (this side / the first), each the round's better of out
  # of place and in place; then their median.
  ratios="$(paste <(tr ' ' '\n' <<<"${best[$b]}" | grep .) \
                  <(tr ' ' '\n' <<<"${best[$first]}" | grep .) |
            awk '$2 > 0 {printf "%.3f\n", $1 / $2}')"
  printf '%s / %s, paired by round: median %s (rounds: %s)\n' "$b" "$first" \
    "$(sort -g <<<"$ratios" | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')" \
    "$(awk '{printf "%.2f ", $1}' <<<"$ratios")"
done
