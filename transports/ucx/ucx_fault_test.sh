#!/usr/bin/env bash
# A rank SIGKILLed in the middle of an all_reduce over UCX: every survivor's
# Wait must end with UNAVAILABLE or DEADLINE_EXCEEDED within its timeout plus
# 1 s (testing/fault_rank checks its own), and relayrun must exit non-zero
# naming the dead rank. Runs over shared memory (the loss shows as the
# deadline) and over TCP with UCX peer error handling (the loss shows as
# UNAVAILABLE), with the victim a plain rank and the store's host, rank 0.
set -uo pipefail

lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-relay}/testing/runfiles.sh"
[[ -e "$lib" ]] || lib="$(dirname "$0")/../../testing/runfiles.sh"
# shellcheck source=testing/runfiles.sh
source "$lib"
RELAYRUN="$(runfile tools/relayrun)"
FAULT_BIN="$(runfile testing/fault_rank)"
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# run LABEL N VICTIM TIMEOUT [VAR=VALUE...]: one job, checked. With WITHIN
# set, survivors must fail within WITHIN seconds with UNAVAILABLE naming
# the victim (the failure monitor's heartbeats, not the timeout).
run() {
  local label="$1" n="$2" victim="$3" timeout="$4"
  shift 4
  local start=$SECONDS out rc
  local codes="UNAVAILABLE|DEADLINE_EXCEEDED"
  [[ -n "${WITHIN:-}" ]] && codes="UNAVAILABLE"
  out="$(env "$@" "$RELAYRUN" -n "$n" --keep-going --timeout 60 -- \
    "$FAULT_BIN" --victim "$victim" --timeout "$timeout" \
    ${WITHIN:+--within "$WITHIN"} ${FAULT_EXTRA:-} 2>&1)"
  rc=$?
  last_out="$out"
  local ok=1
  [[ $rc == 137 ]] || { fail "$label: relayrun exited $rc, want 137 (the victim's SIGKILL)"; ok=0; }
  grep -q "relayrun: rank $victim was killed by SIGKILL" <<<"$out" ||
    { fail "$label: relayrun did not name rank $victim"; ok=0; }
  local survivors
  survivors="$(grep -cE "^\[[0-9]+\] rank [0-9]+: all_reduce #[0-9]+ failed after [0-9.]+ s: ($codes)" <<<"$out")"
  [[ "$survivors" == $((n - 1)) ]] ||
    { fail "$label: $survivors of $((n - 1)) survivors reported the loss in time"; ok=0; }
  if ((ok)); then
    echo "ok: $label ($((SECONDS - start)) s)"
    grep "failed after" <<<"$out" | sed 's/^/    /'
  else
    sed 's/^/    /' <<<"$out" | tail -n 20
  fi
}

run "shared memory, 4 ranks, rank 1 killed" 4 1 3 UCX_TLS=shm,self
run "shared memory, 3 ranks, rank 0 (store host) killed" 3 0 3 UCX_TLS=shm,self
run "tcp with peer errors, 4 ranks, rank 2 killed" 4 2 10 UCX_TLS=tcp,self RELAY_UCX_ERROR_MODE=peer
# With heartbeats every survivor learns of the loss in about
# RELAY_PEER_TIMEOUT, not its 60 s timeout, and names the victim, whichever
# path brought the news: UCX's own error (recent UCX resets a killed peer's
# shared-memory endpoints) or the failure monitor.
WITHIN=5 run "shared memory, 4 ranks, rank 1 killed, heartbeats" 4 1 60 \
  UCX_TLS=shm,self RELAY_PEER_TIMEOUT=1
named="$(grep -cE "failed after .*rank 1 (was lost|lost|failed)" <<<"$last_out")"
[[ "$named" == 3 ]] || fail "$named of 3 survivors named rank 1"
# A frozen rank (SIGSTOP) keeps its connections open, so no transport can
# tell; only missed heartbeats can. The watcher that saw it says "lost",
# the others "failed".
FAULT_EXTRA="--freeze 8" WITHIN=5 run "shared memory, 4 ranks, rank 1 frozen, heartbeats" \
  4 1 60 UCX_TLS=shm,self RELAY_PEER_TIMEOUT=1
heard="$(grep -cE "failed after .*rank 1 (lost|failed): no heartbeat" <<<"$last_out")"
[[ "$heard" -ge 1 ]] || fail "no survivor blamed rank 1's missing heartbeat"
WITHIN=5 run "shared memory, 3 ranks, rank 0 (store host) killed, heartbeats" 3 0 60 \
  UCX_TLS=shm,self RELAY_PEER_TIMEOUT=1
# Survivors of a SIGKILL shrink to a smaller group and carry on there
# (the store's host, rank 0, must survive).
FAULT_EXTRA="--shrink 1" WITHIN=5 run "shared memory, 4 ranks, rank 2 killed, survivors shrink" \
  4 2 60 UCX_TLS=shm,self RELAY_PEER_TIMEOUT=1
shrank="$(grep -cE "rank [0-9]+: shrank to rank [0-2] of 3; 10 all_reduces right" <<<"$last_out")"
[[ "$shrank" == 3 ]] || fail "$shrank of 3 survivors shrank and finished"

# Without --keep-going relayrun stops the survivors at once and still names
# the dead rank.
start=$SECONDS
out="$(UCX_TLS=shm,self "$RELAYRUN" -n 3 --grace 1 -- "$FAULT_BIN" --victim 2 --timeout 30 2>&1)"
rc=$?
[[ $rc == 137 ]] || fail "plain relayrun exited $rc, want 137"
grep -q "relayrun: rank 2 was killed by SIGKILL; stopping the other ranks" <<<"$out" ||
  fail "plain relayrun did not name rank 2"
((SECONDS - start < 15)) || fail "plain relayrun took $((SECONDS - start)) s to stop the job"

((failures == 0)) || { echo "$failures check(s) failed"; exit 1; }
echo "all UCX fault checks passed"
