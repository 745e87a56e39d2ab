#!/usr/bin/env bash
# torch.distributed with backend="relay" (Debian's python3-torch), 1 to 4
# processes on the ucx transport: every rank runs backend_test.py and must
# print "rank R: N checks passed". Ranks start under tools/relayrun, which
# sets torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
# MASTER_PORT): Debian's torchrun (torch 1.13 on Python 3.11) dies before
# starting workers (its Std.from_str("0") returns None, since Python 3.11's
# Flag iteration skips the zero member).
set -uo pipefail

lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-relay}/testing/runfiles.sh"
[[ -e "$lib" ]] || lib="$(dirname "$0")/../../testing/runfiles.sh"
# shellcheck source=testing/runfiles.sh
source "$lib"
RELAYRUN="$(runfile tools/relayrun)"
# Debian's interpreter, the one python3-torch is installed for (a pyenv or
# venv python3 earlier in PATH would lack torch).
PYTHON=/usr/bin/python3

# The extension is built under bazel-bin; the package's __init__.py is a
# source file: put both on one path.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/relay_torch"
cp "$(runfile embed/torch/relay_torch/__init__.py)" "$work/relay_torch/"
cp "$(runfile embed/torch/relay_torch/_relay_torch.so)" "$work/relay_torch/"
# Run from $work: Python puts the script's directory first on sys.path, and
# beside the runfile that is the source tree, which lacks the extension.
cp "$(runfile embed/torch/backend_test.py)" "$work/"
test_py="$work/backend_test.py"


failures=0
for n in 1 2 3 4; do
  out="$(cd "$work" && PYTHONPATH="$work" OMP_NUM_THREADS=1 timeout 300 \
    "$RELAYRUN" -n "$n" --timeout 240 -- "$PYTHON" "$test_py" 2>&1)"
  rc=$?
  passed="$(grep -cE "^(\[[0-9]+\] )?rank [0-9]+: [0-9]+ checks passed" <<<"$out")"
  if [[ $rc == 0 && "$passed" == "$n" ]]; then
    echo "ok: $n process(es): $(grep -m1 -oE "[0-9]+ checks passed.*" <<<"$out")"
  else
    echo "FAIL: $n process(es): torchrun exited $rc, $passed of $n ranks passed"
    tail -n 40 <<<"$out" | sed 's/^/    /'
    failures=$((failures + 1))
  fi
done
((failures == 0)) || { echo "$failures run(s) failed"; exit 1; }
echo "torch backend checks passed"
