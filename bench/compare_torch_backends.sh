#!/usr/bin/env bash
# torch.distributed all_reduce with backend="relay" (ucx transport) against
# backend="gloo", 1 MB to 64 MB, on 2 and 4 processes of this host, in one
# run, and the busbw ratio per size. Needs the torch extension built:
#   bazel build //embed/torch:relay_torch
#   bench/compare_torch_backends.sh OUT_DIR [PROCESS_COUNTS...]   (default 2 4)
# Writes OUT_DIR/<backend>-<n>.json and .txt, and OUT_DIR/ratio.txt.
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
for n in "${counts[@]}"; do
  for backend in relay gloo; do
    echo "== $backend, $n processes" >&2
    tools/relayrun -n "$n" --timeout 900 -- /usr/bin/python3 bench/torch_allreduce.py \
      "$backend" "$out/$backend-$n.json" | sed 's/^\[0\] //' | tee "$out/$backend-$n.txt"
  done
done
/usr/bin/python3 - "$out" "${counts[@]}" <<'PY' | tee "$out/ratio.txt"
import json, sys
out, counts = sys.argv[1], sys.argv[2:]
print(f"{'procs':>5} {'size (B)':>10} {'relay busbw':>12} {'gloo busbw':>11} {'relay/gloo':>10}")
for n in counts:
    relay = json.load(open(f"{out}/relay-{n}.json"))["rows"]
    gloo = json.load(open(f"{out}/gloo-{n}.json"))["rows"]
    for r, g in zip(relay, gloo):
        print(f"{n:>5} {r['bytes']:>10} {r['busbw']:>12.3f} {g['busbw']:>11.3f} "
              f"{r['busbw'] / g['busbw']:>10.2f}")
PY
