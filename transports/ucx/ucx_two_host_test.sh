#!/usr/bin/env bash
# Two "hosts" on one machine: two network namespaces joined by a veth pair,
# each running half of the ranks with tools/relayrun --nnodes 2, the store on
# the first host's veth address, and UCX over TCP between them (UCX_TLS=tcp,
# so no rank can take a shared-memory shortcut across the "hosts"). Runs the
# conformance suite with 2 ranks per host. The namespaces are created here
# and removed on exit; where they cannot be made (no root, no iproute2, a
# sandbox without CAP_SYS_ADMIN) the test says why and passes as skipped.
set -uo pipefail

lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-relay}/testing/runfiles.sh"
[[ -e "$lib" ]] || lib="$(dirname "$0")/../../testing/runfiles.sh"
# shellcheck source=testing/runfiles.sh
source "$lib"
RELAYRUN="$(runfile tools/relayrun)"
RANK_BIN="$(runfile testing/conformance_rank)"

suffix="$$"
NS_A="relay_a_$suffix" NS_B="relay_b_$suffix"
VETH_A="rlya$suffix" VETH_B="rlyb$suffix"
ADDR_A=192.168.213.1 ADDR_B=192.168.213.2 PORT=29611

skip() {
  echo "SKIPPED: $*"
  exit 0
}

cleanup() {
  ip netns del "$NS_A" 2>/dev/null
  ip netns del "$NS_B" 2>/dev/null
}
trap cleanup EXIT

command -v ip >/dev/null || skip "iproute2 (ip) is not installed"
((EUID == 0)) || skip "creating network namespaces needs root"
ip netns add "$NS_A" 2>/dev/null || skip "ip netns add failed (no CAP_SYS_ADMIN here?)"
ip netns add "$NS_B" || skip "ip netns add failed"
ip link add "$VETH_A" type veth peer name "$VETH_B" || skip "cannot create a veth pair"
ip link set "$VETH_A" netns "$NS_A" && ip link set "$VETH_B" netns "$NS_B" ||
  skip "cannot move the veth ends into the namespaces"
ip -n "$NS_A" addr add "$ADDR_A/24" dev "$VETH_A"
ip -n "$NS_B" addr add "$ADDR_B/24" dev "$VETH_B"
for ns in "$NS_A" "$NS_B"; do
  ip -n "$ns" link set lo up
done
ip -n "$NS_A" link set "$VETH_A" up
ip -n "$NS_B" link set "$VETH_B" up
echo "hosts: $NS_A ($ADDR_A, $VETH_A) and $NS_B ($ADDR_B, $VETH_B)"

export RELAY_TOKEN="two-host-$suffix-$RANDOM$RANDOM"
common=(--nnodes 2 --store-addr "$ADDR_A" --store-port "$PORT" --transport ucx --timeout 300)
ip netns exec "$NS_A" env UCX_TLS=tcp,self UCX_NET_DEVICES="$VETH_A" \
  "$RELAYRUN" -n 2 --node-rank 0 "${common[@]}" -- "$RANK_BIN" --timeout 60 \
  >"${TEST_TMPDIR:-/tmp}/host_a.$suffix" 2>&1 &
pid_a=$!
ip netns exec "$NS_B" env UCX_TLS=tcp,self UCX_NET_DEVICES="$VETH_B" \
  "$RELAYRUN" -n 2 --node-rank 1 "${common[@]}" -- "$RANK_BIN" --timeout 60 \
  >"${TEST_TMPDIR:-/tmp}/host_b.$suffix" 2>&1
rc_b=$?
wait "$pid_a"
rc_a=$?
out="$(cat "${TEST_TMPDIR:-/tmp}/host_a.$suffix" "${TEST_TMPDIR:-/tmp}/host_b.$suffix")"
rm -f "${TEST_TMPDIR:-/tmp}/host_a.$suffix" "${TEST_TMPDIR:-/tmp}/host_b.$suffix"
passed="$(grep -c "cases, 0 failed" <<<"$out")"
if [[ $rc_a != 0 || $rc_b != 0 || "$passed" != 4 ]]; then
  echo "FAIL: host A exit $rc_a, host B exit $rc_b, $passed of 4 ranks clean"
  # UCX's own warnings at teardown would bury the cause.
  grep -v "UCX  WARN" <<<"$out" | tail -n 30 | sed 's/^/    /'
  exit 1
fi
grep "cases, 0 failed" <<<"$out" | sed 's/^/    /'
echo "the conformance suite passed across two namespaces over UCX/TCP"
