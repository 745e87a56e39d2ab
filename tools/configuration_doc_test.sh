#!/usr/bin/env bash
# docs/configuration.md is what //tools:configuration_doc prints from the
# configuration table (runtime/config.cc): a setting added, changed or
# removed without regenerating the page fails here.
set -uo pipefail
lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-relay}/testing/runfiles.sh"
[[ -e "$lib" ]] || lib="$(dirname "$0")/../testing/runfiles.sh"
# shellcheck source=testing/runfiles.sh
source "$lib"
doc="$(runfile docs/configuration.md)"
gen="$(runfile tools/configuration_doc)"
if ! diff -u "$doc" <("$gen"); then
  echo "FAIL: docs/configuration.md is stale; regenerate it:"
  echo "  bazel run //tools:configuration_doc > docs/configuration.md"
  exit 1
fi
echo "ok: docs/configuration.md matches the configuration table"
