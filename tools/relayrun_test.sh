#!/usr/bin/env bash
# Tests tools/relayrun end to end with shell programs as ranks: environment,
# output prefixes, failure propagation, signal forwarding, timeouts, bad
# arguments and the multi-host command printout.
set -uo pipefail

RELAYRUN="${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-relay}/tools/relayrun"
[[ -x "$RELAYRUN" ]] || RELAYRUN="$(dirname "$0")/relayrun"
TMP="$(mktemp -d "${TEST_TMPDIR:-/tmp}/relayrun_test.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

expect_grep() {  # file pattern what
  grep -q -- "$2" "$1" || { fail "$3: '$2' not in $(basename "$1"):"; sed 's/^/    /' "$1"; }
}

# 1. Environment and prefixes.
"$RELAYRUN" -n 3 -- sh -c 'echo "hello $RELAY_RANK/$RELAY_WORLD_SIZE local $RELAY_LOCAL_RANK/$RELAY_LOCAL_WORLD_SIZE torch $RANK/$WORLD_SIZE port $RELAY_STORE_PORT=$MASTER_PORT addr $RELAY_STORE_ADDR token $RELAY_TOKEN"; echo "oops $RELAY_RANK" >&2' \
  >"$TMP/out" 2>"$TMP/err"
rc=$?
[[ $rc == 0 ]] || fail "clean job exited $rc"
for r in 0 1 2; do
  expect_grep "$TMP/out" "^\[$r\] hello $r/3 local $r/3 torch $r/3 port \([0-9]*\)=\1 addr 127.0.0.1 token [0-9a-f]\{64\}$" "environment of rank $r"
  expect_grep "$TMP/err" "^\[$r\] oops $r$" "stderr of rank $r"
done
tokens="$(sed -n 's/.*token \([0-9a-f]*\)$/\1/p' "$TMP/out" | sort -u | wc -l)"
[[ "$tokens" == 1 ]] || fail "ranks saw $tokens different tokens"

# 2. A failing rank stops the others and is named.
start=$SECONDS
"$RELAYRUN" -n 3 --grace 1 -- sh -c 'if [ "$RELAY_RANK" = 1 ]; then exit 3; fi; exec sleep 30' \
  >"$TMP/out" 2>"$TMP/err"
rc=$?
[[ $rc == 3 ]] || fail "failing job exited $rc, want 3"
(( SECONDS - start < 10 )) || fail "failing job took $((SECONDS - start)) s"
expect_grep "$TMP/err" "rank 1 exited with status 3" "failure message"

# 3. A rank killed by a signal.
"$RELAYRUN" -n 2 --grace 1 -- sh -c 'if [ "$RELAY_RANK" = 0 ]; then kill -9 $$; fi; exec sleep 30' \
  >"$TMP/out" 2>"$TMP/err"
rc=$?
[[ $rc == 137 ]] || fail "killed job exited $rc, want 137"
expect_grep "$TMP/err" "rank 0 was killed by SIGKILL" "signal message"

# 4. SIGTERM reaches every rank.
"$RELAYRUN" -n 2 -- sh -c 'trap "echo got TERM; exit 0" TERM; echo ready; while :; do sleep 0.05; done' \
  >"$TMP/out" 2>"$TMP/err" &
pid=$!
for _ in $(seq 100); do
  [[ "$(grep -c ready "$TMP/out" 2>/dev/null)" == 2 ]] && break
  sleep 0.05
done
kill -TERM "$pid"
wait "$pid"
rc=$?
[[ $rc == 143 ]] || fail "job sent SIGTERM exited $rc, want 143 (128 + SIGTERM)"
expect_grep "$TMP/out" "^\[0\] got TERM" "TERM forwarded to rank 0"
expect_grep "$TMP/out" "^\[1\] got TERM" "TERM forwarded to rank 1"

# 5. --timeout stops a hung job.
start=$SECONDS
"$RELAYRUN" -n 2 --timeout 1 --grace 1 -- sleep 30 >"$TMP/out" 2>"$TMP/err"
rc=$?
[[ $rc == 124 ]] || fail "timed-out job exited $rc, want 124"
(( SECONDS - start < 8 )) || fail "timed-out job took $((SECONDS - start)) s"
expect_grep "$TMP/err" "still running after 1 s" "timeout message"

# 6. Bad arguments: one line, exit 2.
for bad in "-n 2" "-n 0 -- true" "-n 2 --nnodes 2 --node-rank 2 -- true" "-n 1 --bogus -- true"; do
  # shellcheck disable=SC2086
  "$RELAYRUN" $bad >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [[ $rc == 2 ]] || fail "'relayrun $bad' exited $rc, want 2"
done
"$RELAYRUN" -n 1 -- /nonexistent/program >"$TMP/out" 2>"$TMP/err"
rc=$?
[[ $rc == 127 ]] || fail "missing program exited $rc, want 127"
expect_grep "$TMP/err" "cannot start /nonexistent/program" "missing program message"

# 7. Multi-host: the per-host commands.
"$RELAYRUN" -n 4 --hosts nodeA,nodeB --store-port 4000 -- ./train --lr 0.1 >"$TMP/out" 2>"$TMP/err"
rc=$?
[[ $rc == 0 ]] || fail "--hosts exited $rc"
expect_grep "$TMP/out" "^RELAY_TOKEN=[0-9a-f]\{64\} relayrun -n 4 --nnodes 2 --node-rank 0 --store-addr nodeA --store-port 4000 -- ./train --lr 0.1$" "host 0 command"
expect_grep "$TMP/out" "--node-rank 1 --store-addr nodeA" "host 1 command"

# 8. --nnodes: this host's share of the global ranks.
RELAY_TOKEN=shared "$RELAYRUN" -n 2 --nnodes 2 --node-rank 1 --store-port 4000 -- \
  sh -c 'echo "$RELAY_RANK/$RELAY_WORLD_SIZE $RELAY_TOKEN"' >"$TMP/out" 2>"$TMP/err"
expect_grep "$TMP/out" "^\[2\] 2/4 shared$" "second host's first rank"
expect_grep "$TMP/out" "^\[3\] 3/4 shared$" "second host's second rank"

# 9. Killing relayrun kills the ranks (parent-death signal): none is left.
"$RELAYRUN" -n 3 -- sh -c 'echo $$ > "$0/rank$RELAY_RANK.pid"; exec sleep 60' "$TMP" \
  >"$TMP/out" 2>"$TMP/err" &
pid=$!
for _ in $(seq 100); do
  [[ -s "$TMP/rank0.pid" && -s "$TMP/rank1.pid" && -s "$TMP/rank2.pid" ]] && break
  sleep 0.05
done
kill -KILL "$pid"
wait "$pid" 2>/dev/null
sleep 1
for r in 0 1 2; do
  rank_pid="$(cat "$TMP/rank$r.pid" 2>/dev/null)"
  # Alive: there, and not a zombie (killed, waiting for init to reap it).
  state="$(sed -n 's/^[0-9]* (.*) \([A-Za-z]\).*/\1/p' "/proc/$rank_pid/stat" 2>/dev/null)"
  if [[ -n "$state" && "$state" != Z ]]; then
    fail "rank $r (pid $rank_pid) outlived a killed relayrun"
    kill -KILL "$rank_pid" 2>/dev/null
  fi
done

# 10. A stopped rank is named when another rank fails.
"$RELAYRUN" -n 2 --grace 1 -- sh -c 'if [ "$RELAY_RANK" = 1 ]; then kill -STOP $$; fi; sleep 0.5; exit 3' \
  >"$TMP/out" 2>"$TMP/err"
rc=$?
[[ $rc == 3 ]] || fail "job with a stopped rank exited $rc, want 3"
expect_grep "$TMP/err" "rank 1 is stopped" "stopped rank named"

# 11. --ssh: the token reaches the ranks through ssh's standard input, never
# its command line. A stand-in ssh records its arguments and runs the
# command here.
mkdir -p "$TMP/bin"
ln -sf "$(realpath "$RELAYRUN")" "$TMP/bin/relayrun"
cat >"$TMP/bin/ssh" <<EOF_SSH
#!/bin/sh
shift  # The host.
echo "\$*" >> "$TMP/ssh_args"
exec sh -c "\$*"
EOF_SSH
chmod +x "$TMP/bin/ssh"
RELAY_TOKEN=s3cret-token PATH="$TMP/bin:$PATH" "$RELAYRUN" -n 1 --hosts hostA,hostB \
  --store-port 4000 --ssh -- sh -c 'echo "token=$RELAY_TOKEN"' >"$TMP/out" 2>"$TMP/err"
rc=$?
[[ $rc == 0 ]] || { fail "--ssh job exited $rc"; sed 's/^/    /' "$TMP/err"; }
[[ "$(grep -c "token=s3cret-token" "$TMP/out")" == 2 ]] || fail "--ssh: ranks did not get the token"
if grep -q "s3cret-token" "$TMP/ssh_args"; then fail "--ssh put the token on ssh's command line"; fi

# 12. Shared memory the ranks leave in /dev/shm is removed when the job ends:
# relay's (named after the rank's pid) and UCX's made during the job that no
# process holds; not one made before the job, nor one a live process holds.
if [[ -d /dev/shm && -w /dev/shm ]]; then
  before="/dev/shm/ucx_shm_posix_relayruntest$$a"
  held="/dev/shm/ucx_shm_posix_relayruntest$$b"
  touch "$before"
  sleep 1.1
  "$RELAYRUN" -n 1 -- sh -c '
    touch "/dev/shm/relay-$$-0123456789abcdef" "/dev/shm/ucx_shm_posix_relayruntest$1c" "$0"
    (exec 3<"$0"; touch "$2"; exec sleep 5) >/dev/null 2>&1 &
    while [ ! -e "$2" ]; do sleep 0.01; done
    exit 0' "$held" $$ "$TMP/holding" >"$TMP/out" 2>"$TMP/err"
  expect_grep "$TMP/err" "removed 2 shared-memory object" "leftover shm removed"
  ls /dev/shm/relay-*-0123456789abcdef 2>/dev/null && fail "relay segment left behind"
  [[ -e "/dev/shm/ucx_shm_posix_relayruntest$$c" ]] && fail "UCX segment left behind"
  [[ -e "$before" ]] || fail "a segment made before the job was removed"
  [[ -e "$held" ]] || fail "a segment a live process holds was removed"
  rm -f "$before" "$held" "/dev/shm/ucx_shm_posix_relayruntest$$c" /dev/shm/relay-*-0123456789abcdef
fi

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all relayrun checks passed"
