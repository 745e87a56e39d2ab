#!/usr/bin/env bash
# The conformance suite over UCX with ranks as processes: world sizes 1 to 8,
# once over shared memory (UCX_TLS=shm,self) and once over TCP
# (UCX_TLS=tcp,self), each job started by tools/relayrun.
#
# Usage: ucx_conformance_test.sh [MAX_SIZE]   (default
# $RELAY_UCX_CONFORMANCE_MAX_SIZE, else 8; the tsan config lowers it, since
# eight ThreadSanitizer processes on two cores take minutes)
set -uo pipefail

lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-relay}/testing/runfiles.sh"
[[ -e "$lib" ]] || lib="$(dirname "$0")/../../testing/runfiles.sh"
# shellcheck source=testing/runfiles.sh
source "$lib"
RELAYRUN="$(runfile tools/relayrun)"
RANK_BIN="$(runfile testing/conformance_rank)"
MAX_SIZE="${1:-${RELAY_UCX_CONFORMANCE_MAX_SIZE:-8}}"
failures=0

for tls in shm,self tcp,self; do
  for n in $(seq 1 "$MAX_SIZE"); do
    start=$SECONDS
    out="$(UCX_TLS=$tls "$RELAYRUN" -n "$n" --transport ucx --timeout 600 -- \
      "$RANK_BIN" --timeout 120 2>&1)"
    rc=$?
    summary="$(grep -c "cases, 0 failed" <<<"$out")"
    if [[ $rc != 0 || "$summary" != "$n" ]]; then
      echo "FAIL: UCX_TLS=$tls, $n ranks (relayrun exit $rc):"
      grep -v "cases$" <<<"$out" | grep -v "UCX  WARN" | tail -n 30 | sed 's/^/    /'
      failures=$((failures + 1))
    else
      cases="$(sed -n 's/^\[0\] rank 0: \([0-9]*\) cases.*/\1/p' <<<"$out")"
      echo "ok: UCX_TLS=$tls, $n ranks, $cases cases each, $((SECONDS - start)) s"
    fi
  done
done
# Ranks that disagree on UCX_TLS (rank 2 excludes shared memory): UCX still
# connects them over TCP, and every rank must learn at once that there is no
# shared-memory exchange, instead of the others waiting for rank 2 in its
# setup until the store's timeout (the relayrun timeout below fails it).
start=$SECONDS
out="$(UCX_TLS=shm,tcp,self "$RELAYRUN" -n 3 --transport ucx --timeout 120 -- \
  sh -c 'if [ "$RELAY_RANK" = 2 ]; then export UCX_TLS=tcp,self; fi; exec "$0" "$@"' \
  "$RANK_BIN" --filter _n3_c1_ --timeout 60 2>&1)"
rc=$?
if [[ $rc != 0 || "$(grep -c "cases, 0 failed" <<<"$out")" != 3 ]] ||
   ! grep -q "UCX_TLS excludes shared memory on rank(s) 2" <<<"$out"; then
  echo "FAIL: ranks with different UCX_TLS (relayrun exit $rc):"
  grep -v "UCX  WARN" <<<"$out" | tail -n 30 | sed 's/^/    /'
  failures=$((failures + 1))
else
  echo "ok: ranks with different UCX_TLS, no exchange, $((SECONDS - start)) s"
fi

((failures == 0)) || { echo "$failures job(s) failed"; exit 1; }
echo "all UCX conformance jobs passed"
