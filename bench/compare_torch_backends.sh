#!/usr/bin/env bash
# torch.distributed all_reduce with backend="relay" (ucx transport) against
# backend="gloo", 1 MB to 64 MB, on 2 and 4 processes of this host, in one
# run, and the busbw ratio per size. Needs the torch extension built:
#   bazel build //embed/torch:relay_torch
#   [ROUNDS=3] bench/compare_torch_backends.sh OUT_DIR [PROCESS_COUNTS...]
#   (default 2 4)
# Runs ROUNDS alternating rounds of both backends per process count and
# compares medians. Writes OUT_DIR/<backend>-<n>-r<round>.json and .txt, and
# OUT_DIR/ratio.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: bench/compare_torch_backends.sh OUT_DIR [PROCESS_COUNTS...]}"
shift
counts=("${@:-2 4}")
read -r -a counts <<<"${counts[*]}"
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/relay_torch"
so=bazel-bin/embed/torch/relay_torch/_relay_torch.so
[[ -e "$so" ]] || { echo "build it first: bazel build //embed/torch:relay_torch" >&2; exit 2; }
cp embed/torch/relay_torch/__init__.py "$so" "$work/relay_torch/"
export PYTHONPATH="$work" OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo
rounds="${ROUNDS:-3}"
for n in "${counts[@]}"; do
  # Alternating rounds: the machine's noise hits both backends alike.
  for ((r = 1; r <= rounds; r++)); do
    for backend in relay gloo; do
      echo "== $backend, $n processes, round $r of $rounds" >&2
      tools/relayrun -n "$n" --timeout 900 -- /usr/bin/python3 bench/torch_allreduce.py \
        "$backend" "$out/$backend-$n-r$r.json" | sed 's/^\[0\] //' | tee "$out/$backend-$n-r$r.txt"
    done
  done
done
/usr/bin/python3 - "$out" "$rounds" "${counts[@]}" <<'PY' | tee "$out/ratio.txt"
import json, statistics, sys
out, rounds, counts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def busbw(backend, n):
    """{bytes: [busbw of each round]}"""
    rows = {}
    for r in range(1, rounds + 1):
        for row in json.load(open(f"{out}/{backend}-{n}-r{r}.json"))["rows"]:
            rows.setdefault(row["bytes"], []).append(row["busbw"])
    return rows
print(f"median busbw (GB/s) of {rounds} alternating rounds; each round's figure in []")
print(f"{'procs':>5} {'size (B)':>10} {'relay':>7} {'gloo':>7} {'relay/gloo':>10}  rounds relay | gloo")
for n in counts:
    relay, gloo = busbw("relay", n), busbw("gloo", n)
    for size in sorted(relay):
        r, g = statistics.median(relay[size]), statistics.median(gloo[size])
        each = lambda xs: " ".join(f"{x:.2f}" for x in xs)
        print(f"{n:>5} {size:>10} {r:>7.3f} {g:>7.3f} {r / g:>10.2f}  "
              f"[{each(relay[size])} | {each(gloo[size])}]")
PY
