#!/usr/bin/env bash
# Lease 76 (2 H200s): the stream-order tests of cuda_ipc_transport_test at
# d3d8f39 (CallsAfterABusyStreamWaitForIt on the committed code, which
# always waits), as threads with a GPU each.
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/gpu_env.sh"
out="$1"; mkdir -p "$out"
cd "$here"
{ nvidia-smi -L; date -u; } > "$out/test.txt"
timeout 200 ./cuda_ipc_transport_test --gtest_filter='*CallsAfterABusyStream*:*StreamsStayInOrder*:*CallerStreamDestroyed*:*DestroyedStreamsCall*:*FirstCallsDoNotWait*' >> "$out/test.txt" 2>&1
echo "rc=$?" >> "$out/test.txt"
grep -E "OK \]|FAILED|PASSED|rc=" "$out/test.txt"
