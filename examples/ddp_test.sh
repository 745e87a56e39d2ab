#!/usr/bin/env bash
# DDP training with backend="relay" and with backend="gloo" from the same
# seed, 2 and 3 processes: each run's ranks end with identical parameters,
# and relay's final parameters agree with gloo's to float32 rounding (the
# two may sum gradients in different orders).
set -uo pipefail

lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-relay}/testing/runfiles.sh"
[[ -e "$lib" ]] || lib="$(dirname "$0")/../testing/runfiles.sh"
# shellcheck source=testing/runfiles.sh
source "$lib"
RELAYRUN="$(runfile tools/relayrun)"
PYTHON=/usr/bin/python3  # Debian's, which has python3-torch
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/relay_torch"
cp "$(runfile embed/torch/relay_torch/__init__.py)" \
  "$(runfile embed/torch/relay_torch/_relay_torch.so)" "$work/relay_torch/"
cp "$(runfile examples/ddp_train.py)" "$work/"
export PYTHONPATH="$work" OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo

failures=0
for n in 2 3; do
  ran=0
  for backend in relay gloo; do
    out="$(cd "$work" && "$RELAYRUN" -n "$n" --timeout 240 -- \
      "$PYTHON" ddp_train.py "$backend" "$work/$backend-$n.pt" 2>&1)"
    rc=$?
    equal="$(grep -c "parameters equal rank 0's" <<<"$out")"
    if [[ $rc != 0 || "$equal" != "$n" ]]; then
      echo "FAIL: $backend, $n processes: exit $rc, $equal of $n ranks match rank 0"
      tail -n 30 <<<"$out" | sed 's/^/    /'
      failures=$((failures + 1))
    else
      echo "ok: $backend, $n processes: $(grep -m1 -oE "final loss [0-9.]+" <<<"$out")"
      ran=$((ran + 1))
    fi
  done
  # Compare only when both runs wrote their parameters (a failed run is
  # already counted above).
  ((ran == 2)) || continue
  "$PYTHON" - "$work/relay-$n.pt" "$work/gloo-$n.pt" <<'PY' || failures=$((failures + 1))
import sys, torch
relay, gloo = torch.load(sys.argv[1]), torch.load(sys.argv[2])
initial = torch.cat([p.detach().flatten() for p in (torch.manual_seed(0), torch.nn.Sequential(
    torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8)))[1].parameters()])
diff = (relay - gloo).abs().max().item()
moved = (gloo - initial).abs().max().item()
# float32 rounding of gradient sums in another order, over 30 steps.
ok = diff <= 1e-5 and moved > 1e-2
print(f"{'ok' if ok else 'FAIL'}: relay vs gloo, {relay.numel()} parameters: "
      f"max difference {diff:.3g} (training moved them up to {moved:.3g})")
sys.exit(0 if ok else 1)
PY
done
((failures == 0)) || { echo "$failures check(s) failed"; exit 1; }
echo "DDP with relay matches gloo"
