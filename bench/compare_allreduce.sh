#!/usr/bin/env bash
# File: bench/compare_allreduce.sh
#
# relay's all_reduce against its CPU peers on this host, side by side in
# alternating rounds (bench/relaybench), float32 sum, one folder of runs and
# one Markdown table per world size:
#   --transport loopback  relay's ranks as threads against Open MPI's
#                         MPI_Allreduce (every tuned algorithm; the best
#                         one per size and round)
#   --transport ucx       relay's ranks as processes over UCX (started by
#                         tools/relayrun, UCX_TLS=shm,self unless
#                         RELAY_UCX_TLS says) against Open MPI and Gloo
#                         (each algorithm in GLOO_ALGS; the best per size)
#
# Usage: bench/compare_allreduce.sh [--transport loopback|ucx] [OUT_DIR]
# Environment (defaults): NP ("2 4"), ROUNDS (3), ITERS (20), WARMUP (5),
#   MIN_BYTES (8), MAX_BYTES (64M), GLOO_ALGS ("ring ring_chunked
#   halving_doubling"; Debian's Gloo aborts in bcube at 4 processes from
#   256 KB, so it is left out unless named)
# Examples:
#   bench/compare_allreduce.sh /tmp/loopback
#   NP=2 ROUNDS=1 ITERS=10 bench/compare_allreduce.sh --transport ucx /tmp/quick
#   MIN_BYTES=1M bench/compare_allreduce.sh --transport ucx /tmp/large
# Writes OUT_DIR/npN/ (every run, rounds.txt: host, commit, commands) and
# OUT_DIR/README.md (the tables); exits 1 if any run found wrong elements.
set -euo pipefail
cd "$(dirname "$0")/.."

transport=loopback
if [[ "${1:-}" == --transport ]]; then
  transport="${2:?--transport needs loopback or ucx}"
  shift 2
fi
case "$transport" in
  loopback|ucx) ;;
  *) echo "compare_allreduce.sh: --transport is loopback or ucx, not $transport" >&2; exit 2 ;;
esac
out="${1:-/tmp/relay-allreduce-$transport-$(date +%Y%m%d-%H%M%S)}"
nps="${NP:-2 4}"
rounds="${ROUNDS:-3}"
tls="${RELAY_UCX_TLS:-shm,self}"
gloo_algs="${GLOO_ALGS-ring ring_chunked halving_doubling}"
sweep="-b ${MIN_BYTES:-8} -e ${MAX_BYTES:-64M} -f 2 -n ${ITERS:-20} -w ${WARMUP:-5}"

targets=(//bench:collectives //bench/peers:mpi_collectives)
[[ $transport == ucx ]] && targets+=(//bench/peers:gloo_allreduce)
bazel build -c opt "${targets[@]}" >&2
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
cp -f bazel-bin/bench/collectives "$bin/"
[[ $transport == ucx ]] && cp -f bazel-bin/bench/peers/gloo_allreduce "$bin/"

mkdir -p "$out"
echo "# all_reduce on $transport: relay against its peers" > "$out/README.md"
status=0
for np in $nps; do
  sides=()
  if [[ $transport == loopback ]]; then
    sides+=("relay=$bin/collectives --collective all_reduce --ranks $np $sweep --json {out}.json")
  else
    sides+=("relay=UCX_TLS=$tls tools/relayrun -n $np --no-prefix -- $bin/collectives \
--collective all_reduce --transport ucx $sweep --json {out}.json")
  fi
  # run_mpi_allreduce.sh --best writes one {out}.algK.json per algorithm.
  sides+=("mpi=bench/peers/run_mpi_allreduce.sh --best --np $np $sweep --json {out}.json")
  if [[ $transport == ucx && -n "$gloo_algs" ]]; then
    # A Gloo algorithm that fails (Debian's Gloo aborts now and then with
    # "Connection closed by peer") is noted on stderr and left out.
    sides+=("gloo=for a in $gloo_algs; do tools/relayrun -n $np --no-prefix -- \
$bin/gloo_allreduce --algorithm \$a $sweep --json {out}.\$a.json \
|| echo \"gloo \$a failed\" >&2; done")
  fi
  PYTHONPATH=bench python3 -m relaybench rounds --keep-going --rounds "$rounds" \
    --out "$out/np$np" "${sides[@]}"
  {
    echo
    echo "## $np ranks"
    echo
    PYTHONPATH=bench python3 -m relaybench table "$out/np$np" --side relay \
      --intervals || status=$?
  } >> "$out/README.md"
done
cat "$out/README.md"
exit "$status"
