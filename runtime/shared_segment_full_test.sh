#!/usr/bin/env bash
# A /dev/shm too small for a shared segment: every rank's
# SharedSegment::Create fails with FailedPrecondition, and nothing is left
# behind, instead of a rank dying of SIGBUS when it first touches a page
# (slot_exchange_test's SharedSegmentTest.FullDevShmFailsCleanly). Runs it
# in a private mount namespace whose /dev/shm is a 1 MiB tmpfs; where one
# cannot be made (no root, a sandbox without CAP_SYS_ADMIN) the test says
# why and passes as skipped.
set -uo pipefail

lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-relay}/testing/runfiles.sh"
[[ -e "$lib" ]] || lib="$(dirname "$0")/../testing/runfiles.sh"
# shellcheck source=testing/runfiles.sh
source "$lib"
BIN="$(runfile runtime/slot_exchange_test)"

skip() {
  echo "SKIPPED: $*"
  exit 0
}

command -v unshare >/dev/null || skip "unshare (util-linux) is not installed"
unshare -m true 2>/dev/null || skip "cannot make a mount namespace here"
limit=$((1 << 20))
# Exit 77 from inside: the tmpfs could not be mounted.
unshare -m sh -c '
  mount -t tmpfs -o size="$1" tmpfs /dev/shm 2>/dev/null || exit 77
  RELAY_TEST_SHM_LIMIT="$1" exec "$2" \
    --gtest_filter=SharedSegmentTest.FullDevShmFailsCleanly
' sh "$limit" "$BIN"
rc=$?
((rc == 77)) && skip "cannot mount a tmpfs on /dev/shm in a mount namespace"
exit "$rc"
