"""One rank of torch's symmetric-memory all_reduce, timed as the peer of
relay's cuda_ipc transport (bench/gpu/compare_nccl.sh, TORCH_SYMM=1):

    relayrun -n 2 -- python3 torch_symm_mem.py -b 8 -e 1G -f 2 -n 20 -w 5 --json OUT.json

float32 sum, one process per GPU (GPU LOCAL_RANK). torch's kernels read
peers' memory in place, so the input lives in one symmetric buffer
(symm_mem.empty, rendezvoused once) that every size is a prefix of; relay
copies the caller's buffer into its arena instead, so this side starts
each call with its data already where the kernel wants it.

Each size has two halves in the nccl-tests rows relaybench reads:
out of place is torch.ops.symm_mem.one_shot_all_reduce_out (every rank
reads every peer's buffer), in place is two_shot_all_reduce_ (reduce-
scatter by loads, all-gather by stores). For each, -w untimed calls, then
-n calls queued back to back on the current stream, timed to the last's
end; the time is the slowest rank's. With -c 1 the result of one call is
checked element by element first (rank-dependent data, exact in float32).
Host-side exchanges go through a gloo group, so NCCL plays no part.
NVLink multicast stays off (TORCH_SYMM_MEM_DISABLE_MULTICAST=1).
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def timed(call, warmup, iters):
    """Seconds per call: iters calls queued back to back after warmup."""
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters


def slowest(seconds):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def wrong_elements(got, want):
    return int((got != want).sum().item())


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-b", "--minbytes", default="8")
    p.add_argument("-e", "--maxbytes", default="1G")
    p.add_argument("-f", "--stepfactor", type=int, default=2)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup_iters", type=int, default=5)
    p.add_argument("-c", "--check", type=int, default=1)
    p.add_argument("--json", help="JSON file rank 0 writes (bench/report.h's form)")
    args = p.parse_args()
    if os.environ.get("TORCH_SYMM_MEM_DISABLE_MULTICAST") != "1":
        print("set TORCH_SYMM_MEM_DISABLE_MULTICAST=1 (bench/gpu/gpu_env.sh)", file=sys.stderr)
        return 2
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(device)
    dist.init_process_group(backend="gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    group = dist.group.WORLD.group_name
    if hasattr(symm_mem, "enable_symm_mem_for_group"):
        symm_mem.enable_symm_mem_for_group(group)  # Needed before torch 2.8.
    min_bytes, max_bytes = parse_size(args.minbytes), parse_size(args.maxbytes)
    esize = 4
    capacity = max(1, max_bytes // esize)
    buf = symm_mem.empty(capacity, dtype=torch.float32, device=device)
    symm_mem.rendezvous(buf, group)
    out = torch.empty(capacity, dtype=torch.float32, device=device)
    bus_factor = 2 * (size - 1) / size
    rows = []
    if rank == 0:
        print(f"# torch {torch.__version__} symm_mem all_reduce, {size} processes; "
              "out of place: one_shot_all_reduce_out, in place: two_shot_all_reduce_")
        print(f"#{'size':>11} {'count':>12} {'type':>8} {'redop':>6} {'root':>6} "
              f"{'time':>8} {'algbw':>7} {'busbw':>7} {'#wrong':>6} "
              f"{'time':>8} {'algbw':>7} {'busbw':>7} {'#wrong':>6}", flush=True)
    nbytes = min_bytes
    while nbytes <= max_bytes:
        n = max(1, nbytes // esize)
        inp, res = buf[:n], out[:n]
        pattern = torch.arange(n, dtype=torch.float32, device=device) % 31
        mine = pattern + rank
        want = pattern * size + sum(range(size))
        one_shot = lambda: torch.ops.symm_mem.one_shot_all_reduce_out(inp, "sum", group, res)
        two_shot = lambda: torch.ops.symm_mem.two_shot_all_reduce_(inp, "sum", group)
        halves = []
        for call, result in ((one_shot, res), (two_shot, inp)):
            wrong = -1
            if args.check:
                inp.copy_(mine)
                res.zero_()
                torch.cuda.synchronize()
                dist.barrier()
                call()
                torch.cuda.synchronize()
                wrong = wrong_elements(result, want)
                dist.barrier()  # No rank refills its buffer while a peer reads it.
            inp.copy_(mine)
            sec = slowest(timed(call, args.warmup_iters, args.iters))
            algbw = n * esize / sec / 1e9
            halves.append({"time_us": sec * 1e6, "algbw": algbw,
                           "busbw": algbw * bus_factor, "wrong": wrong})
        rows.append({"size": n * esize, "count": n, "type": "float", "redop": "sum",
                     "root": -1, "out_of_place": halves[0], "in_place": halves[1]})
        if rank == 0:
            o, i = halves
            print(f"{n * esize:>12} {n:>12} {'float':>8} {'sum':>6} {-1:>6} "
                  f"{o['time_us']:>8.2f} {o['algbw']:>7.2f} {o['busbw']:>7.2f} {o['wrong']:>6} "
                  f"{i['time_us']:>8.2f} {i['algbw']:>7.2f} {i['busbw']:>7.2f} {i['wrong']:>6}",
                  flush=True)
        nbytes *= args.stepfactor
    total_wrong = sum(max(h["wrong"], 0) for r in rows for h in (r["out_of_place"], r["in_place"]))
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump({"collective": "all_reduce", "nranks": size, "peer": "torch-symm-mem",
                       "bus_factor": bus_factor, "comments": [f"torch {torch.__version__}"],
                       "rows": rows, "out_of_bounds": total_wrong}, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()
    return 1 if total_wrong else 0


if __name__ == "__main__":
    sys.exit(main())
