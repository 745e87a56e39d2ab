#!/usr/bin/env bash
# Lease 66 (2 H200s): all_reduce 8 B - 8 MB, raw NCCL (default and
# symmetric) against cuda_ipc eager, on the caller's stream and replayed
# from a graph, 100 timed calls a size, 3 alternating rounds, at cee9e90
# (findings 43 and 45 in).
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/gpu_env.sh"
lease_begin "$1"
cd "$here"
SYMMETRIC=1 STREAMS=" " RING=0 WINDOW=0 COPY=0 ITERS=100 \
  timeout 460 ./compare_nccl.sh "$work/ar" 8M 3 all_reduce > "$work/ar.log" 2>&1
echo "compare rc=$?"
for ref in raw raw-symmetric; do
  PYTHONPATH=. python3 -m relaybench table "$work/ar/all_reduce" --reference "$ref" --stat median --intervals
done > "$work/ar_tables.md" 2>&1
grep -A25 "### cuda_ipc against raw " "$work/ar_tables.md" | cut -d'|' -f2-5,9
grep -A25 "### cuda_ipc-on-stream against raw " "$work/ar_tables.md" | cut -d'|' -f2-5,9
lease_end
