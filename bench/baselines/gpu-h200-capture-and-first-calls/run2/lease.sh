#!/usr/bin/env bash
# 1 H200: (1) the watchdog's event queries during a global-mode capture on another thread:
# before (device_watch_test_old) and with the watchdog's capture mode thread-local;
# (2) relay's ring captured into a graph over NCCL (1 rank) and cuda_ipc (1 rank as a thread,
# 2 processes sharing the GPU); (3) run_checks.sh.
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?}"
cd "$here"
source ./gpu_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for b in device_watch_test_old device_watch_test; do
  s=$SECONDS
  timeout 60 ./$b > $out/$b.log 2>&1
  echo "$b rc=$? ($((SECONDS - s)) s)"
  grep -E "OK \] .*Global|FAILED \]|Failure|Value of|Actual|Which is|Expected|rror" $out/$b.log | head -12
done
s=$SECONDS
timeout 90 ./nccl_transport_test --gtest_filter='*Captured*' > $out/nccl_captured.log 2>&1
echo "nccl captured rc=$? ($((SECONDS - s)) s)"
grep -E "OK \]|FAILED \]|Failure|round|rror" $out/nccl_captured.log | head -8
s=$SECONDS
timeout 90 ./cuda_ipc_transport_test --gtest_filter='*Captured*' > $out/ipc_captured.log 2>&1
echo "cuda_ipc captured (threads) rc=$? ($((SECONDS - s)) s)"
grep -E "OK \]|FAILED \]|Failure|round|rror" $out/ipc_captured.log | head -8
s=$SECONDS
RELAY_CUDA_IPC_SHARED_GPU=1 timeout 150 python3 relayrun -n 2 --timeout 140 -- \
  ./cuda_ipc_transport_test --gtest_filter='*Captured*' > $out/ipc_captured_processes.log 2>&1
echo "cuda_ipc captured (processes) rc=$? ($((SECONDS - s)) s)"
grep -E "OK \]|FAILED \]|Failure|round|rror" $out/ipc_captured_processes.log | head -10
s=$SECONDS
CHECK_LIMIT=200 timeout $((575 - SECONDS)) bash ./run_checks.sh $out/checks > $out/checks.txt 2>&1
echo "run_checks rc=$? ($((SECONDS - s)) s)"
grep -v "^PASS" $out/checks.txt; grep -c "^PASS" $out/checks.txt
grep -E "^\[[01]\] \[  (PASSED|FAILED) |FAILED  \]" $out/checks/cuda_ipc_transport_test_processes.log | head -12
tar czf $out/checks.tgz -C $out checks && rm -rf $out/checks
