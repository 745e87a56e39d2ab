#!/usr/bin/env bash
# 2 H200s: kernels launched as dependents from RELAY_CUDA_IPC_GRAPH_LAUNCH_BYTES (8 KiB):
# (1) correctness with mixed launches: the transport's tests as threads on 2 GPUs, every
# collective checked as processes (after and on the stream, graphs), the conformance suite;
# (2) eager all_reduce 8 B - 8 MB, 4 alternating rounds: graph relaunches at every size (the
# old default) against the new default, after and on the stream, and raw NCCL.
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?}"
cd "$here"
source ./gpu_env.sh
export PYTHONPATH="$here"
s=$SECONDS; timeout 100 ./cuda_ipc_transport_test > $out/cuda_ipc_transport_test.log 2>&1
echo "cuda_ipc_transport_test rc=$? ($((SECONDS - s)) s)"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $out/cuda_ipc_transport_test.log
for c in all_reduce all_gather reduce_scatter all_to_all broadcast; do
  for mode in "" "--cuda-stream own --stream-order on"; do
    timeout 60 python3 relayrun -n 2 --no-prefix --timeout 50 -- ./collectives --transport cuda_ipc \
      --collective $c -b 8 -e 64M -f 8 -n 5 -w 2 -c 1 $mode > $out/check_${c}.log 2>&1
    echo "$c ${mode:+on-stream} rc=$? $(grep -ci "wrong" $out/check_${c}.log) wrong-lines; $(grep -E "wrong elements" $out/check_${c}.log | head -1)"
  done
done
s=$SECONDS; timeout 60 python3 relayrun -n 2 --transport cuda_ipc --timeout 50 -- ./conformance_rank --timeout 30 > $out/conformance.log 2>&1
echo "conformance rc=$? ($((SECONDS - s)) s)"; tail -2 $out/conformance.log
sweep="-b 8 -e 8M -f 4 -n 100 -w 10 -c 0 --collective all_reduce --json {out}.json"
ipc="python3 $here/relayrun -n 2 --no-prefix --timeout 120 -- $here/collectives --transport cuda_ipc $sweep"
old="env RELAY_CUDA_IPC_GRAPH_LAUNCH_BYTES=68719476736"
s=$SECONDS
timeout $((290 - SECONDS)) python3 -m relaybench rounds --rounds 4 --out $out/eager \
  "raw=$here/nccl_collectives $sweep -t 1" \
  "graph=$old $ipc" "graph-on=$old $ipc --cuda-stream own --stream-order on" \
  "new=$ipc" "new-on=$ipc --cuda-stream own --stream-order on" > $out/eager.log 2>&1
echo "rounds rc=$? ($((SECONDS - s)) s)"
for r in raw graph graph-on; do python3 -m relaybench table $out/eager --reference $r --stat median --intervals; done > $out/eager.md 2>&1
grep -A16 "### new against graph \|### new-on against graph-on" $out/eager.md | cut -c1-120
tar czf $out/eager.tgz -C $out eager && rm -rf $out/eager
