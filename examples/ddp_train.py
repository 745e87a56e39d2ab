"""Data-parallel training with torch DistributedDataParallel on any backend.

Run one process per rank with torchrun's variables set (tools/relayrun sets
them), e.g.
    tools/relayrun -n 2 -- /usr/bin/python3 examples/ddp_train.py relay OUT.pt

A two-layer MLP, the same initial weights on every rank (seed 0), each rank
training on its own shard of a synthetic regression set (seeded by rank),
plain SGD for --steps steps with DDP averaging gradients every step through
`backend` ("relay", "gloo", ...). Rank 0 saves the final parameters to OUT;
every rank checks that its parameters equal rank 0's exactly (DDP's
promise) and prints its final loss. --device cuda trains on GPU LOCAL_RANK
(one GPU per process; for relay set RELAY_TRANSPORT=nccl); the data is made
on the host either way, so runs on both devices see the same samples.
"""
import os
import argparse
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("backend", help='torch.distributed backend: "relay" or "gloo"')
    p.add_argument("out", help="where rank 0 saves the final parameters (torch.save)")
    p.add_argument("--steps", type=int, default=30, help="SGD steps (default 30)")
    p.add_argument("--batch", type=int, default=64, help="samples per rank per step")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where the model trains (cuda: GPU LOCAL_RANK)")
    args = p.parse_args()
    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)  # NCCL-backed transports bind to it

    if args.backend == "relay":
        import relay_torch  # noqa: F401  (registers backend "relay")
    dist.init_process_group(backend=args.backend)
    rank = dist.get_rank()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(),
                                torch.nn.Linear(64, 8)).to(device)
    # Small buckets, so one step's gradients take several all_reduces.
    ddp = DDP(model, bucket_cap_mb=0.005,
              device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)

    data = torch.Generator().manual_seed(1000 + rank)
    target_map = torch.randn(32, 8, generator=torch.Generator().manual_seed(7))
    loss = torch.tensor(0.0)
    for _ in range(args.steps):
        x = torch.randn(args.batch, 32, generator=data)
        y = x @ target_map + 0.1 * torch.randn(args.batch, 8, generator=data)
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()

    flat = torch.cat([q.detach().flatten() for q in model.parameters()])
    mine = flat.clone()
    dist.broadcast(flat, src=0)
    same = torch.equal(mine, flat)
    print(f"rank {rank}: backend {args.backend}, {args.steps} steps, final loss "
          f"{loss.item():.6f}, parameters {'equal' if same else 'DIFFER from'} rank 0's")
    if rank == 0:
        torch.save(mine.cpu(), args.out)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
