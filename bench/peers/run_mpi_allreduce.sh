#!/usr/bin/env bash
# File: bench/peers/run_mpi_allreduce.sh
#
# Builds //bench/peers:mpi_collectives and runs it under mpirun, so Open MPI's
# all_reduce (or another collective, see --help) can be set beside relay's
# figures. With --best, sweeps once per Open MPI tuned allreduce algorithm and
# ends with the best algorithm per size.
#
# Example:
#   bench/peers/run_mpi_allreduce.sh --np 4 -b 8 -e 64M -f 8 -n 20 -w 5
#   bench/peers/run_mpi_allreduce.sh --best --np 2 -b 8 -e 16M -f 8
set -euo pipefail

readonly PROG="${0##*/}"
readonly TARGET="//bench/peers:mpi_collectives"
# Open MPI 4.1's coll_tuned_allreduce_algorithm values; 0 leaves the choice to
# the tuned component's fixed decision rules.
readonly ALGORITHMS=(
  "default"
  "basic_linear"
  "nonoverlapping"
  "recursive_doubling"
  "ring"
  "segmented_ring"
  "rabenseifner"
)

usage() {
  cat <<EOF
usage: $PROG [--np N] [--best] [mpi_collectives flags...]

Builds $TARGET with bazel and runs it with
  mpirun --allow-run-as-root --oversubscribe -np N \$MPIRUN_ARGS mpi_collectives ...
Only rank 0 prints: nccl-tests-style rows (size, count, type, redop, root, then
time/algbw/busbw/#wrong out-of-place and in-place).

Script flags:
  --np N        number of MPI processes (default 2)
  --best        run the sweep once per Open MPI allreduce algorithm 0..6
                (--mca coll_tuned_use_dynamic_rules 1
                 --mca coll_tuned_allreduce_algorithm K), each under a
                "### algorithm K" label, then print the fastest algorithm per
                size; all_reduce only. With --json FILE, algorithm K writes
                FILE with ".algK" before its extension.
  -h, --help    this message

Everything else goes to mpi_collectives unchanged (nccl-tests flags):
  -b SIZE -e SIZE -f FACTOR   size sweep (SIZE: 8, 1K, 64M, 1G; default 32M..32M)
  -n ITERS -w WARMUP          timed and warm-up iterations per size (20, 5)
  -c 0|1                      check results (1)
  --dtype float32|float64|int32   --op sum|prod|min|max
  --collective all_reduce|all_gather|reduce_scatter|broadcast|reduce|all_to_all
  --json FILE                 also write the rows as JSON
Environment: MPIRUN_ARGS, extra mpirun arguments (split on spaces).
Exit status: that of mpi_collectives (1 wrong results, 2 bad flags); 2 for a
bad script flag; 1 when the build or any --best run fails.
EOF
}

die() {
  echo "$PROG: $*" >&2
  exit 2
}

np=2
best=0
args=()
while (($# > 0)); do
  case "$1" in
    --np)
      (($# >= 2)) || die "--np wants a value (see --help)"
      np="$2"
      shift 2
      ;;
    --np=*)
      np="${1#*=}"
      shift
      ;;
    --best)
      best=1
      shift
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    *)
      args+=("$1")
      shift
      ;;
  esac
done
[[ "$np" =~ ^[1-9][0-9]*$ ]] || die "--np wants a positive integer, got '$np'"

# In --best mode, the collective must be all_reduce and --json FILE is split
# per algorithm; find both in the pass-through arguments.
json=""
json_at=-1
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --collective)
      if ((best)) && [[ "${args[i + 1]:-}" != "all_reduce" ]]; then
        die "--best tunes MPI_Allreduce only; got --collective '${args[i + 1]:-}'"
      fi
      ;;
    --collective=*)
      if ((best)) && [[ "${args[i]#*=}" != "all_reduce" ]]; then
        die "--best tunes MPI_Allreduce only; got ${args[i]}"
      fi
      ;;
    --json)
      json="${args[i + 1]:-}"
      json_at=$((i + 1))
      ;;
    --json=*)
      json="${args[i]#*=}"
      json_at=$i
      ;;
  esac
done

# Run from the repository root, wherever we were called from.
script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(git -C "$script_dir" rev-parse --show-toplevel 2>/dev/null ||
  (cd "$script_dir/../.." && pwd))"
# A relative --json path stays relative to where we were called from.
if [[ -n "$json" && "$json" != /* ]]; then
  json="$PWD/$json"
  if [[ "${args[json_at]}" == --json=* ]]; then
    args[json_at]="--json=$json"
  else
    args[json_at]="$json"
  fi
fi
cd "$repo_root"

command -v mpirun >/dev/null || die "mpirun not found (run tools/bootstrap.sh)"
command -v bazel >/dev/null || die "bazel not found (run tools/bootstrap.sh)"

echo "$PROG: building $TARGET" >&2
if ! bazel build --noshow_progress --ui_event_filters=-info "$TARGET"; then
  echo "$PROG: bazel build $TARGET failed" >&2
  exit 1
fi
# Run a private copy: a later build by someone else must not swap the binary
# under a running sweep.
work="$(mktemp -d "${TMPDIR:-/tmp}/mpi_collectives.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cp "$(bazel info bazel-bin 2>/dev/null)/bench/peers/mpi_collectives" "$work/"
binary="$work/mpi_collectives"

# shellcheck disable=SC2206  # MPIRUN_ARGS is split on purpose.
mpirun_cmd=(mpirun --allow-run-as-root --oversubscribe -np "$np" ${MPIRUN_ARGS:-})

if ((!best)); then
  "${mpirun_cmd[@]}" "$binary" ${args[@]+"${args[@]}"}
  exit 0
fi

# --best: one sweep per algorithm, then the fastest per size.
failed=()
for k in "${!ALGORITHMS[@]}"; do
  run_args=(${args[@]+"${args[@]}"})
  if [[ -n "$json" ]]; then
    base="${json%.json}"
    out="$base.alg$k${json#"$base"}"
    if [[ "${run_args[json_at]}" == --json=* ]]; then
      run_args[json_at]="--json=$out"
    else
      run_args[json_at]="$out"
    fi
  fi
  echo "### algorithm $k: coll_tuned_allreduce_algorithm=$k (${ALGORITHMS[k]})"
  if ! "${mpirun_cmd[@]}" --mca coll_tuned_use_dynamic_rules 1 \
    --mca coll_tuned_allreduce_algorithm "$k" \
    "$binary" ${run_args[@]+"${run_args[@]}"} | tee "$work/alg$k.txt"; then
    failed+=("$k")
  fi
  echo
done

echo "### best Open MPI allreduce algorithm per size (lowest time; nranks $np)"
for k in "${!ALGORITHMS[@]}"; do
  [[ -f "$work/alg$k.txt" ]] || continue
  # Data rows have 13 fields: size count type redop root, then time algbw
  # busbw #wrong out-of-place and in-place.
  awk -v k="$k" '!/^#/ && NF == 13 { print $1, k, $6, $8, $10, $12 }' \
    "$work/alg$k.txt"
done | awk -v names="$(printf '%s\n' "${ALGORITHMS[@]}")" '
  BEGIN {
    n = split(names, name, "\n")
    printf "#%11s  %9s  %7s  %-20s  %9s  %7s  %s\n", "size (B)", \
      "oop (us)", "busbw", "out-of-place best", "ip (us)", "busbw", \
      "in-place best"
  }
  {
    size = $1
    if (!(size in oop) || $3 + 0 < oop[size]) {
      oop[size] = $3 + 0; oop_bw[size] = $4; oop_k[size] = $2
    }
    if ($5 != "N/A" && (!(size in ip) || $5 + 0 < ip[size])) {
      ip[size] = $5 + 0; ip_bw[size] = $6; ip_k[size] = $2
    }
    if (!(size in seen)) { seen[size] = 1; order[++rows] = size }
  }
  END {
    for (r = 1; r <= rows; r++) {
      s = order[r]
      printf "%12s  %9.2f  %7s  %-20s  %9.2f  %7s  %s\n", s, oop[s], \
        oop_bw[s], oop_k[s] " " name[oop_k[s] + 1], ip[s], ip_bw[s], \
        ip_k[s] " " name[ip_k[s] + 1]
    }
  }'

if ((${#failed[@]} > 0)); then
  echo "$PROG: the runs for algorithm(s) ${failed[*]} failed" >&2
  exit 1
fi
