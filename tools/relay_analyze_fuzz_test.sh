#!/usr/bin/env bash
# tools/relay_analyze_fuzz.py, seeded and short: the regression half of
# fuzzing the flight-record reader (testing/fuzz/run.sh runs it long).
set -euo pipefail
lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-relay}/testing/runfiles.sh"
[[ -e "$lib" ]] || lib="$(dirname "$0")/../testing/runfiles.sh"
source "$lib"
fuzz="$(runfile tools/relay_analyze_fuzz.py)"
seeds="$(dirname "$(runfile testing/fuzz/corpus/flight_record/stall.json)")"
crashes="${TEST_UNDECLARED_OUTPUTS_DIR:-$(mktemp -d)}"
/usr/bin/python3 "$fuzz" --runs 5000 --seed 7 --crashes "$crashes" "$seeds"
