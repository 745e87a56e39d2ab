#!/usr/bin/env bash
# 1 H200: (1) NCCL calls captured into a graph: HEAD's transport (1b22709) against the new
# capture path; (2) a first ring all_reduce on a busy GPU between 2 processes, the engine's
# kernels loaded lazily (noprepare) and at creation; (3) the NCCL transport's per-call cost:
# before stream ids (600d4d5^) against now, one rank, eager 8 B - 8 KB, on and after the
# stream; (4) run_checks.sh.
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?}"
cd "$here"
source ./gpu_env.sh
export PYTHONPATH="$here"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for b in nccl_transport_test_head nccl_transport_test; do
  s=$SECONDS
  timeout 60 ./$b --gtest_filter='*Captured*' > $out/captured_$b.log 2>&1
  echo "$b captured rc=$? ($((SECONDS - s)) s)"
  grep -E "OK \]|FAILED \]|Failure|round|error|rror" $out/captured_$b.log | head -6
done
for b in cuda_ipc_transport_test_noprepare cuda_ipc_transport_test; do
  s=$SECONDS
  RELAY_CUDA_IPC_SHARED_GPU=1 timeout 60 python3 relayrun -n 2 --timeout 50 -- ./$b \
    --gtest_filter='*FirstCalls*' > $out/first_$b.log 2>&1
  echo "$b first calls rc=$? ($((SECONDS - s)) s)"
  grep -E "OK \]|FAILED \]|waited|element" $out/first_$b.log | head -6
done
sides=()
for b in nccl_old new; do
  bin=./collectives_$b; [ $b = new ] && bin=./collectives
  c="$bin --transport nccl --ranks 1 --collective all_reduce -b 8 -e 8K -f 4 -n 2000 -w 100 -c 0 --json {out}.json"
  sides+=("$b-on=$c --cuda-stream own --stream-order on" "$b-after=$c")
done
s=$SECONDS
timeout 150 python3 -m relaybench rounds --rounds 6 --out $out/ab "${sides[@]}" > $out/ab.log 2>&1
echo "a/b rounds rc=$? ($((SECONDS - s)) s)"
for r in nccl_old-on nccl_old-after; do python3 -m relaybench table $out/ab --reference $r --stat median --intervals; done > $out/ab.md 2>&1
grep -A8 "### new-on against nccl_old-on\|### new-after against nccl_old-after" $out/ab.md | cut -c1-140
s=$SECONDS
CHECK_LIMIT=200 timeout $((575 - SECONDS)) bash ./run_checks.sh $out/checks > $out/checks.txt 2>&1
echo "run_checks rc=$? ($((SECONDS - s)) s)"
grep -v "^PASS" $out/checks.txt; grep -c "^PASS" $out/checks.txt
grep -E "Captured|FirstCalls" $out/checks/nccl_transport_test.log $out/checks/cuda_ipc_transport_test.log | grep -E "OK|FAILED" | head
grep -E "^\[[01]\] \[  (PASSED|FAILED) |FAILED  \]" $out/checks/cuda_ipc_transport_test_processes.log | head -12
tar czf $out/checks.tgz -C $out checks && rm -rf $out/checks
tar czf $out/ab.tgz -C $out ab && rm -rf $out/ab
