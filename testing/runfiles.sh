# testing/runfiles.sh: sourced by the shell tests that start ranks as
# processes. runfile PATH prints where PATH (relative to the workspace) is:
# its runfile under `bazel test`; outside it, tools/ from the source tree and
# built binaries from bazel-bin/.
#
# Each test finds this file the same way, before it can call runfile:
#   lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-relay}/testing/runfiles.sh"
#   [[ -e "$lib" ]] || lib="$(dirname "$0")/../../testing/runfiles.sh"
#   source "$lib"
RELAY_SOURCE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

runfile() {
  local p="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-relay}/$1"
  [[ -e "$p" ]] && { echo "$p"; return; }
  [[ -e "$RELAY_SOURCE_ROOT/$1" && "$1" == tools/* ]] && { echo "$RELAY_SOURCE_ROOT/$1"; return; }
  echo "$RELAY_SOURCE_ROOT/bazel-bin/$1"
}
