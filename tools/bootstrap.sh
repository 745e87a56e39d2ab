#!/usr/bin/env bash
# File: tools/bootstrap.sh
#
# Installs every Debian package relay's build, tests and benchmarks need
# (Bazel, the compiler, Abseil, GoogleTest, Google Benchmark, Open MPI, ...).
# Idempotent: prints nothing and touches nothing when all are installed;
# otherwise runs apt-get update and installs only the missing ones (through
# sudo when not root), printing one line for the set it installs.
#
# Example:
#   tools/bootstrap.sh && bazel test //...
set -euo pipefail

readonly PROG="${0##*/}"
readonly PACKAGES=(
  bazel-bootstrap  # bazel 4.2.3
  bazel-rules-java # /usr/share/bazel/rules/java, see WORKSPACE
  g++
  libabsl-dev
  libgtest-dev
  libgmock-dev
  libbenchmark-dev
  libssl-dev     # libcrypto: HMAC for the TCP store's token handshake
  libucx-dev     # transports/ucx
  ucx-utils      # ucx_perftest, the UCX baseline in bench/
  iproute2       # ip netns: the two-host test
  openmpi-bin    # mpirun, for bench/peers
  libopenmpi-dev # mpi.h and libmpi, for bench/peers
  libgloo-dev    # Gloo, the peer in bench/peers/gloo_allreduce
  python3
  python3-torch    # embed/torch: the torch.distributed backend (torch 1.13, CPU)
  libtorch-dev     # its C++ headers (c10d ProcessGroup, ATen)
  python3-pybind11 # the pybind11 torch was built with
  clang              # testing/fuzz: the libFuzzer build (--config=fuzz)
  libclang-rt-14-dev # libFuzzer and clang's sanitizer runtimes
  git
)

installed() {
  local status
  status="$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" || return 1
  [[ "$status" == "install ok installed" ]]
}

fail() {
  echo "$PROG: $*" >&2
  exit 1
}

command -v dpkg-query >/dev/null ||
  fail "dpkg-query not found: this script is for Debian-based systems"

missing=()
for pkg in "${PACKAGES[@]}"; do
  installed "$pkg" || missing+=("$pkg")
done
((${#missing[@]} == 0)) && exit 0

sudo=()
if ((EUID != 0)); then
  command -v sudo >/dev/null ||
    fail "not root and sudo not found; install as root: ${missing[*]}"
  sudo=(sudo)
fi

log="$(mktemp "${TMPDIR:-/tmp}/bootstrap.XXXXXX.log")"
trap 'rm -f "$log"' EXIT
apt_get() {
  ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get -q "$@" >>"$log" 2>&1
}

echo "$PROG: installing ${missing[*]}"
if ! apt_get update; then
  tail -n 20 "$log" >&2
  fail "apt-get update failed (see above); nothing was installed"
fi
if ! apt_get install -y --no-install-recommends "${missing[@]}"; then
  tail -n 20 "$log" >&2
  fail "apt-get install failed (see above) for: ${missing[*]}"
fi

still_missing=()
for pkg in "${missing[@]}"; do
  installed "$pkg" || still_missing+=("$pkg")
done
((${#still_missing[@]} == 0)) ||
  fail "still not installed after apt-get: ${still_missing[*]}"
