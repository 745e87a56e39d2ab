#!/usr/bin/env bash
# File: bench/gpu/p2p_comm_collectives.sh
#
# The NCCL transport's native all_to_all (grouped ncclSend/ncclRecv) on its
# point-to-point communicator (RELAY_NCCL_P2P_CHANNELS=64, the default)
# against the collectives' communicator (=0: where it ran before),
# alternating ROUNDS times in one run, on every visible GPU (or those
# CUDA_VISIBLE_DEVICES names). COLLECTIVES="all_to_all gather" measured
# gather the same way, when it also took the point-to-point communicator
# (it does not now, so both settings run the same code for it). From the folder bench/gpu/build.sh
# filled; prints algbw per size and setting, rounds side by side.
#
# Usage: p2p_comm_collectives.sh OUT_DIR [ROUNDS]    (default 3)
# Environment: MIN_SIZE, MAX_SIZE (default 1M, 256M; x4 steps), COLLECTIVES
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: p2p_comm_collectives.sh OUT_DIR [ROUNDS]}"
rounds="${2:-3}"
mkdir -p "$out"
# shellcheck source=bench/gpu/gpu_env.sh
source "$here/gpu_env.sh"
gpus=$(gpu_count)
gpu_header "$gpus" | tee "$out/environment.txt"
for c in ${COLLECTIVES:-all_to_all}; do
  for k in $(seq 1 "$rounds"); do
    for p in 64 0; do
      RELAY_NCCL_P2P_CHANNELS=$p "$here/collectives" --transport nccl --ranks "$gpus" \
        --algorithm native --collective "$c" -b "${MIN_SIZE:-1M}" -e "${MAX_SIZE:-256M}" \
        -f 4 -n 20 -w 5 -c 0 --json "$out/${c}_p2p${p}_$k.json" >"$out/${c}_p2p${p}_$k.txt"
    done
  done
  python3 - "$out" "$c" "$rounds" <<'PY'
import sys
out, c, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
def algbw(p, k):  # size -> out-of-place algbw (GB/s)
    rows = {}
    for line in open(f"{out}/{c}_p2p{p}_{k}.txt"):
        f = line.split()
        if f and not line.startswith("#"):
            rows[int(f[0])] = float(f[6])
    return rows
runs = {p: [algbw(p, k) for k in range(1, rounds + 1)] for p in (64, 0)}
print(f"## {c}: out-of-place algbw (GB/s), rounds 1..{rounds}")
print("| size (B) | P2P_CHANNELS=64 | =0 | median 64 / median 0 |")
print("|---:|---|---|---:|")
med = lambda v: sorted(v)[len(v) // 2]
for size in sorted(runs[64][0]):
    a = [r[size] for r in runs[64]]
    b = [r[size] for r in runs[0]]
    print(f"| {size} | {' '.join(f'{x:.1f}' for x in a)} | "
          f"{' '.join(f'{x:.1f}' for x in b)} | {med(a) / med(b):.2f} |")
PY
done
