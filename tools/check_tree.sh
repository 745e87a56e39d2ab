#!/usr/bin/env bash
# File: tools/check_tree.sh
#
# Keeps the repository in its product shape; .ci/run runs it, and it prints
# "PASS check_tree" or "FAIL check_tree" with one line per problem:
#   - library code (runtime/, collectives/, transports/, embed/, relay.*)
#     reads the environment only through runtime/config.cc (no getenv
#     elsewhere, and RELAY_* settings through its typed readers, not
#     GetEnv; tests, testing/, bench/ and tools/ are exempt);
#   - README.md stays a front door: at most 200 lines;
#   - the library's comments, the bench/ drivers and scripts (not
#     bench/baselines/), README.md and docs/*.md read as a product, not
#     a work log: no dated results (2026-11-27), no "session N", no
#     "issue N", no bench/results/ paths. History lives in docs/design/ and
#     figures in bench/baselines/;
#   - bench/results/ stays out of the tree.
# (docs/configuration.md's freshness is //tools:configuration_doc_test.)
#
# Usage: tools/check_tree.sh   (from anywhere; exit 0 when clean)
set -uo pipefail
cd "$(dirname "$0")/.."
problems=()

library_sources() {
  git ls-files -- runtime collectives transports embed 'relay.cc' 'relay.h' |
    grep -E '\.(cc|h|cu|c)$' | grep -vE '(_test|_benchmark|_fuzz)\.(cc|c)$'
}

while IFS= read -r hit; do
  problems+=("getenv outside runtime/config.cc: $hit")
done < <(library_sources | grep -v '^runtime/config.cc$' |
           xargs grep -nE '\bgetenv *\(' 2>/dev/null)
# A RELAY_* setting goes through the table's typed readers, not GetEnv.
while IFS= read -r hit; do
  problems+=("a RELAY_* setting read with GetEnv: $hit")
done < <(library_sources | grep -v '^runtime/config.cc$' |
           xargs grep -nE 'GetEnv\("RELAY_' 2>/dev/null)

lines=$(wc -l < README.md)
((lines <= 200)) || problems+=("README.md has $lines lines (at most 200)")

log_pattern='20[0-9][0-9]-[01][0-9]-[0-3][0-9]|[Ss]ession [0-9]+|[Ii]ssue [0-9]+|bench/results/'
while IFS= read -r hit; do
  problems+=("work log in a comment: $hit")
done < <(library_sources | xargs grep -nE "//.*($log_pattern)" 2>/dev/null)
while IFS= read -r hit; do
  problems+=("work log in bench/: $hit")
done < <(git ls-files -- bench ':!bench/baselines' |
           grep -E '\.(cc|h|cu|sh|py)$|BUILD\.bazel$' | xargs grep -nE "$log_pattern" 2>/dev/null)
while IFS= read -r hit; do
  problems+=("work log in the docs: $hit")
done < <(grep -nE "$log_pattern" README.md docs/*.md 2>/dev/null)

if git ls-files --error-unmatch bench/results >/dev/null 2>&1; then
  problems+=("bench/results/ is in the tree (figures go to bench/baselines/)")
fi

if ((${#problems[@]} == 0)); then
  echo "PASS check_tree"
  exit 0
fi
echo "FAIL check_tree: ${#problems[@]} problem(s)"
printf '  %s\n' "${problems[@]}" | head -n 60
exit 1
