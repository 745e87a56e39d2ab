#!/usr/bin/env bash
# File: bench/gpu/torch_vs_nccl.sh
#
# torch.distributed with backend="relay" (RELAY_TRANSPORT=nccl) against
# backend="nccl" on a GPU host, from the folder bench/gpu/build.sh filled:
#   1. builds relay's torch extension against this host's torch
#      (torch/build_against_torch.py: CUDA torch, stream-ordered tensors);
#   2. the CUDA backend test (backend_cuda_test.py) on every GPU, over
#      nccl and over the default for CUDA tensors on one host (cuda_ipc);
#   3. DDP training (ddp_train.py --device cuda) with relay and with nccl
#      on the same seed: final parameters must agree to float32 rounding;
#   4. all_reduce float32 sum, MIN_BYTES to MAX_BYTES (default 1M to 1G),
#      both backends alternating ROUNDS times (torch_allreduce.py --device
#      cuda: 20 calls queued, timed to the last's end), then the per-size
#      ratio of relay's best busbw to nccl's best (torch_ratio.txt).
# One process per GPU, under relayrun with torchrun's variables.
#
# Usage: torch_vs_nccl.sh OUT_DIR [ROUNDS]      (GPUs: all, or CUDA_VISIBLE_DEVICES)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: torch_vs_nccl.sh OUT_DIR [ROUNDS]}"
rounds="${2:-3}"
min="${MIN_BYTES:-1048576}"
max="${MAX_BYTES:-1073741824}"
mkdir -p "$out"
# shellcheck source=bench/gpu/gpu_env.sh
source "$here/gpu_env.sh"
export PYTHONPATH="$here/torch" OMP_NUM_THREADS=4
gpus=$(gpu_count)
failed=0
step() {  # name, command...: logs to OUT_DIR/name.log, prints PASS/FAIL
  local name="$1"; shift
  local start=$SECONDS
  if "$@" >"$out/$name.log" 2>&1; then
    echo "PASS $name ($((SECONDS - start)) s)"
  else
    echo "FAIL $name ($((SECONDS - start)) s): tail of $out/$name.log:"
    tail -n 25 "$out/$name.log"
    failed=$((failed + 1))
  fi
}
run() {  # backend (unused by the launch: RELAY_TRANSPORT is for relay), python args...
  shift
  RELAY_TRANSPORT=nccl python3 "$here/relayrun" -n "$gpus" --timeout 600 -- python3 "$@"
}
step build python3 "$here/torch/build_against_torch.py" || true
if ! grep -q "^built " "$out/build.log"; then
  echo "$gpus GPUs: the extension did not build; nothing else run"; exit 1
fi
step cuda_test run relay "$here/backend_cuda_test.py"
# RELAY_TRANSPORT unset: CUDA tensors on relay's own wiring (one host).
step cuda_test_cuda_ipc env RELAY_EXPECT_DEVICE_TRANSPORT=cuda_ipc \
  python3 "$here/relayrun" -n "$gpus" --timeout 600 -- python3 "$here/backend_cuda_test.py"
step ddp_relay run relay "$here/ddp_train.py" relay "$out/ddp_relay.pt" --device cuda
step ddp_nccl run nccl "$here/ddp_train.py" nccl "$out/ddp_nccl.pt" --device cuda
step ddp_compare python3 - "$out/ddp_relay.pt" "$out/ddp_nccl.pt" <<'PY'
import sys, torch
relay, nccl = torch.load(sys.argv[1]), torch.load(sys.argv[2])
diff = (relay - nccl).abs().max().item()
print(f"relay vs nccl, {relay.numel()} parameters: max difference {diff:.3g}")
sys.exit(0 if diff <= 1e-5 else 1)
PY
for r in $(seq 1 "$rounds"); do
  for backend in nccl relay; do
    step "bench_${backend}_r$r" run "$backend" "$here/torch_allreduce.py" "$backend" \
      "$out/${backend}_r$r.json" --device cuda --min-bytes "$min" --max-bytes "$max" \
      --warmup 5 --iters 20
  done
done
python3 - "$out" "$rounds" <<'PY' | tee "$out/torch_ratio.txt"
import json, os, sys
out, rounds = sys.argv[1], int(sys.argv[2])
best = {}
for b in ("nccl", "relay"):
    for r in range(1, rounds + 1):
        f = f"{out}/{b}_r{r}.json"
        if not os.path.exists(f):
            continue
        for row in json.load(open(f))["rows"]:
            key = (b, row["bytes"])
            best[key] = max(best.get(key, 0.0), row["busbw"])
print(f"{'size (B)':>12} {'nccl busbw':>11} {'relay busbw':>12} {'relay/nccl':>10}   (best of {rounds} rounds, GB/s)")
for size in sorted({s for _, s in best}):
    n, r = best.get(("nccl", size)), best.get(("relay", size))
    if n and r:
        print(f"{size:>12} {n:>11.2f} {r:>12.2f} {r / n:>10.3f}")
PY
echo "$gpus GPUs: $failed failed"
exit $((failed > 0))
