#!/usr/bin/env bash
# 2 H200s: eager all_reduce 8 B - 64 KB, 200 calls a size, 5 alternating rounds: raw NCCL
# against cuda_ipc queued by graph relaunches (the default) and by kernel launches
# (RELAY_CUDA_IPC_LAUNCH=kernel: programmatic dependents of the call before), after and on
# the caller's stream. Is the eager call bound by the host or by the GPU?
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?}"
cd "$here"
source ./gpu_env.sh
export PYTHONPATH="$here"
sweep="-b 8 -e 64K -f 4 -n 200 -w 20 -c 0 --collective all_reduce --json {out}.json"
ipc="python3 $here/relayrun -n 2 --no-prefix --timeout 120 -- $here/collectives --transport cuda_ipc $sweep"
s=$SECONDS
timeout 400 python3 -m relaybench rounds --rounds 5 --out $out/eager \
  "raw=$here/nccl_collectives $sweep -t 1" \
  "graph=$ipc" "graph-on=$ipc --cuda-stream own --stream-order on" \
  "kernel=env RELAY_CUDA_IPC_LAUNCH=kernel $ipc" \
  "kernel-on=env RELAY_CUDA_IPC_LAUNCH=kernel $ipc --cuda-stream own --stream-order on" \
  > $out/eager.log 2>&1
echo "rounds rc=$? ($((SECONDS - s)) s)"
for r in raw graph graph-on; do python3 -m relaybench table $out/eager --reference $r --stat median --intervals; done > $out/eager.md 2>&1
grep -A12 "### graph against raw\|### kernel against graph \|### kernel-on against graph-on" $out/eager.md | cut -c1-150
tar czf $out/eager.tgz -C $out eager && rm -rf $out/eager
