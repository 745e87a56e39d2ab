"""One rank of the torch all_reduce benchmark (bench/compare_torch_backends.sh).

    tools/relayrun -n 2 -- /usr/bin/python3 bench/torch_allreduce.py relay OUT.json

torch.distributed.all_reduce (sum, float32) on `backend` for sizes 1 MB to
64 MB (x2): --warmup untimed calls, then --iters timed ones per size; the
time is the slowest rank's mean (max over ranks through the backend
itself). The result of the last call is checked element by element. Rank
0 prints nccl-tests-style rows (size, time, algbw, busbw = algbw *
2(n-1)/n) and writes them as JSON to OUT.

--device cuda: tensors on GPU LOCAL_RANK (relay: set RELAY_TRANSPORT=nccl).
The calls are asynchronous there, so the timing differs: the --iters calls
are queued back to back on the current stream in place and timed together
up to torch.cuda.synchronize() (as nccl-tests do); each call doubles the
summed values exactly, which the final check accounts for.
"""
import os
import argparse
import json
import sys
import time

import torch
import torch.distributed as dist


def time_each(t, base, warmup, iters):
    """Host tensors: each call timed on its own, inputs reset between."""
    for _ in range(warmup):
        t.copy_(base)
        dist.all_reduce(t)
    dist.barrier()
    elapsed = 0.0
    for _ in range(iters):
        t.copy_(base)  # Untimed: each call sums the same inputs.
        start = time.perf_counter()
        dist.all_reduce(t)
        elapsed += time.perf_counter() - start
    return elapsed


def time_queued(t, base, warmup, iters):
    """CUDA tensors: iters calls queued in place, timed to the last's end."""
    for _ in range(warmup):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    dist.barrier()
    t.copy_(base)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("backend", help='"relay" or "gloo"')
    p.add_argument("out", help="JSON file rank 0 writes")
    p.add_argument("--min-bytes", type=int, default=1 << 20)
    p.add_argument("--max-bytes", type=int, default=64 << 20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = p.parse_args()
    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if args.backend == "relay":
        import relay_torch  # noqa: F401
    dist.init_process_group(backend=args.backend)
    rank, size = dist.get_rank(), dist.get_world_size()
    rows = []
    nbytes = args.min_bytes
    if rank == 0:
        print(f"# torch {torch.__version__}, backend {args.backend}, {size} processes, {args.device}")
        print(f"{'size (B)':>12} {'time (us)':>12} {'algbw GB/s':>11} {'busbw GB/s':>11}")
    while nbytes <= args.max_bytes:
        n = nbytes // 4
        base = ((torch.arange(n, dtype=torch.float32) % 31) + rank).to(device)
        t = base.clone()
        want = (torch.arange(n, dtype=torch.float32) % 31) * size + sum(range(size))
        if device.type == "cuda":
            elapsed = time_queued(t, base, args.warmup, args.iters)
            # After the first call every rank holds the sum; each later call
            # doubles it (exact in float32: powers of two times integers).
            want = (want * 2 ** (args.iters - 1)).to(device)
        else:
            elapsed = time_each(t, base, args.warmup, args.iters)
        if not torch.equal(t, want):
            bad = (t != want).nonzero()[0].item()
            print(f"rank {rank}: {args.backend} {nbytes} B: element {bad} is {t[bad].item()}, "
                  f"want {want[bad].item()}", file=sys.stderr)
            return 1
        slowest = torch.tensor([elapsed / args.iters], dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        sec = slowest.item()
        algbw = nbytes / sec / 1e9
        busbw = algbw * 2 * (size - 1) / size
        rows.append({"bytes": nbytes, "time_us": sec * 1e6, "algbw": algbw, "busbw": busbw})
        if rank == 0:
            print(f"{nbytes:>12} {sec * 1e6:>12.1f} {algbw:>11.3f} {busbw:>11.3f}", flush=True)
        nbytes *= 2
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump({"backend": args.backend, "processes": size, "device": args.device,
                       "torch": torch.__version__, "rows": rows}, f, indent=1)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
