"""One rank of the torch backend test on CUDA tensors (a GPU host).

    RELAY_TRANSPORT=nccl relayrun -n 2 -- python3 backend_cuda_test.py
    RELAY_EXPECT_DEVICE_TRANSPORT=cuda_ipc relayrun -n 2 -- python3 backend_cuda_test.py

(RELAY_TRANSPORT unset: CUDA tensors on cuda_ipc when the ranks share a
host; RELAY_EXPECT_DEVICE_TRANSPORT makes the test check which one ran.)

Runs with a CUDA torch and the extension built with RELAY_TORCH_CUDA
(embed/torch/build_against_torch.py), one GPU per process (LOCAL_RANK), or
two processes on one GPU over cuda_ipc:
    RELAY_CUDA_IPC_SHARED_GPU=1 RELAY_EXPECT_DEVICE_TRANSPORT=cuda_ipc relayrun -n 2 -- ...
Every collective runs on device tensors with data distinct per rank and
element and is checked element by element. Stream semantics are checked
the way they can fail: an operation issued on a side stream must see the
result of a long kernel queued just before it on that stream (relay orders
itself after the caller's stream), and a kernel queued after wait() on the
current stream must see the operation's result, with no synchronize in
between. Prints "rank R: N checks passed" and exits 0, or lists the
failures and exits 1.
"""
import faulthandler
import os
import sys

import torch
import torch.distributed as dist

import relay_torch  # noqa: F401  (registers backend "relay")

failures = []
checks = 0


def check(ok, what):
    global checks
    checks += 1
    if not ok:
        failures.append(what)


def expect_equal(got, want, what):
    got, want = got.cpu(), want.cpu()
    ok = got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
    check(ok, f"{what}: got {got.flatten()[:6].tolist()}..., want {want.flatten()[:6].tolist()}...")


def data(rank, n, dtype=torch.float32, offset=0, device="cpu"):
    """Distinct per rank and element; exact in the sums of a few ranks."""
    return ((torch.arange(n) % 13) + 16 * (rank + 1) + offset).to(dtype).to(device)


def progress(rank, what):
    print(f"rank {rank}: {what}", flush=True)


def main():
    # A hang shows where it is: every thread's Python stack, then exit 1.
    faulthandler.dump_traceback_later(int(os.environ.get("RELAY_TEST_HANG_S", "120")), exit=True)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    # Round robin where fewer GPUs than ranks are visible (cuda_ipc's
    # processes may share one under RELAY_CUDA_IPC_SHARED_GPU=1).
    dev = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    progress(os.environ.get("RANK", "?"), f"init_process_group on {dev}")
    dist.init_process_group(backend="relay")
    rank, size = dist.get_rank(), dist.get_world_size()
    backend = dist.group.WORLD._get_backend(dev)
    progress(rank, f"CUDA tensors over {backend.device_transport}")
    expect = os.environ.get("RELAY_EXPECT_DEVICE_TRANSPORT")
    if expect:
        check(backend.device_transport == expect,
              f"CUDA tensors over {backend.device_transport}, want {expect}")
    progress(rank, "all_reduce, every dtype")
    ranks = range(size)
    n = 1037

    def d(r, count=n, dtype=torch.float32, offset=0):
        return data(r, count, dtype, offset, dev)

    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.float64):
        t = d(rank, dtype=dtype)
        dist.all_reduce(t)
        expect_equal(t, sum(data(r, n, torch.float64) for r in ranks).to(dtype), f"all_reduce sum {dtype}")
    mixed = [((torch.arange(n) * 7 + r * 5) % 17 + 1).float() + r / 8 for r in ranks]
    everyone = torch.stack(mixed)
    for op, want in ((dist.ReduceOp.MAX, everyone.max(dim=0).values),
                     (dist.ReduceOp.MIN, everyone.min(dim=0).values)):
        t = mixed[rank].to(dev)
        dist.all_reduce(t, op=op)
        expect_equal(t, want, f"all_reduce {op}")
    t = d(rank, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    check(torch.allclose(t.cpu(), sum(data(r, n, torch.float64) for r in ranks) / size), "all_reduce avg")

    progress(rank, "async work")
    # Async Work and its future.
    t = d(rank)
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    expect_equal(t, sum(data(r, n) for r in ranks), "async all_reduce")
    expect_equal(work.get_future().wait()[0], sum(data(r, n) for r in ranks), "future value")

    progress(rank, "streams")
    # Streams. 64 MB, so the kernels before and after take a while.
    big = 16 << 20
    side = torch.cuda.Stream()
    x = torch.full((big,), float(rank + 1), device=dev)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        for _ in range(20):   # a long chain on the side stream...
            x.mul_(1.0)
        x.add_(1.0)           # ...that the all_reduce must see
        w = dist.all_reduce(x, async_op=True)
        w.wait()              # the side stream waits, the host does not
        y = x * 2             # queued after wait(): sees the sum
    side.synchronize()
    want = float(sum(r + 2 for r in ranks))
    check(bool((x == want).all()), f"all_reduce ordered after its stream's work: "
          f"{x[:3].tolist()} vs {want}")
    check(bool((y == 2 * want).all()), "kernel after wait() sees the result")

    progress(rank, "broadcast, reduce")
    # broadcast, reduce.
    t = d(rank)
    dist.broadcast(t, src=size - 1)
    expect_equal(t, data(size - 1, n), "broadcast")
    root = 1 % size
    t = d(rank)
    dist.reduce(t, dst=root)
    if rank == root:
        expect_equal(t, sum(data(r, n) for r in ranks), "reduce")

    progress(rank, "all_gather, gather")
    # all_gather: list (staged on the device) and tensor forms; gather.
    outs = [torch.zeros(n, device=dev) for _ in ranks]
    dist.all_gather(outs, d(rank))
    for r in ranks:
        expect_equal(outs[r], data(r, n), f"all_gather block {r}")
    flat = torch.zeros(n * size, device=dev)
    dist.all_gather_into_tensor(flat, d(rank))
    expect_equal(flat, torch.cat([data(r, n) for r in ranks]), "all_gather_into_tensor")
    last = size - 1
    gathered = [torch.zeros(n, device=dev) for _ in ranks] if rank == last else None
    dist.gather(d(rank), gather_list=gathered, dst=last)
    if rank == last:
        for r in ranks:
            expect_equal(gathered[r], data(r, n), f"gather block {r}")

    progress(rank, "reduce_scatter, scatter")
    # reduce_scatter: list and tensor forms; scatter.
    out = torch.zeros(n, device=dev)
    dist.reduce_scatter(out, [d(rank, offset=100 * j) for j in ranks])
    expect_equal(out, sum(data(r, n, offset=100 * rank) for r in ranks), "reduce_scatter")
    out = torch.zeros(n, device=dev)
    dist.reduce_scatter_tensor(out, torch.cat([d(rank, offset=100 * j) for j in ranks]))
    expect_equal(out, sum(data(r, n, offset=100 * rank) for r in ranks), "reduce_scatter_tensor")
    out = torch.zeros(n, device=dev)
    dist.scatter(out, [d(0, offset=100 * j) for j in ranks] if rank == 0 else None, src=0)
    expect_equal(out, data(0, n, offset=100 * rank), "scatter")

    progress(rank, "all_to_all")
    # all_to_all: even and uneven.
    inp = torch.cat([d(rank, 4, offset=100 * j) for j in ranks])
    out = torch.zeros(4 * size, device=dev)
    dist.all_to_all_single(out, inp)
    expect_equal(out, torch.cat([data(i, 4, offset=100 * rank) for i in ranks]), "all_to_all_single even")
    inp = torch.cat([d(rank, j + 1, offset=100 * j) for j in ranks])
    out = torch.zeros((rank + 1) * size, device=dev)
    dist.all_to_all_single(out, inp, output_split_sizes=[rank + 1] * size,
                           input_split_sizes=[j + 1 for j in ranks])
    expect_equal(out, torch.cat([data(i, rank + 1, offset=100 * rank) for i in ranks]),
                 "all_to_all_single uneven")

    progress(rank, "isend/irecv, barrier")
    # Point to point around a ring, then a barrier. Over NCCL a rank's
    # point-to-point operations run in order, so a send and a receive that
    # depend on each other are posted in matching order (even ranks send
    # first), as with backend="nccl" (relay's backend does not implement
    # the coalescing that batch_isend_irecv needs on CUDA tensors).
    if size > 1:
        nxt, prev = (rank + 1) % size, (rank - 1) % size
        got = torch.zeros(n, device=dev)
        mine = d(rank)
        post = [lambda: dist.isend(mine, dst=nxt, tag=5), lambda: dist.irecv(got, src=prev, tag=5)]
        reqs = [p() for p in (post if rank % 2 == 0 else post[::-1])]
        for req in reqs:
            req.wait()
        expect_equal(got, data(prev, n), "isend/irecv")

        # A pending receive does not hold up later work on the current
        # stream: rank 1 copies from pageable host memory (which waits for
        # the current stream) while its receive waits for rank 0, which sends
        # only after that copy.
        progress(rank, "pending irecv vs later work on the current stream")
        store = dist.distributed_c10d._get_default_store()
        if rank == 1:
            got = torch.zeros(n, device=dev)
            req = dist.irecv(got, src=0, tag=6)
            later = data(1, n).to(dev)
            store.set("relay_test_copied", "1")
            req.wait()
            expect_equal(got, data(0, n), "irecv completed after the later copy")
            expect_equal(later, data(1, n), "copy queued while a receive was pending")
        elif rank == 0:
            store.wait(["relay_test_copied"])
            dist.send(d(0), dst=1, tag=6)

    progress(rank, "windows")
    # Symmetric windows: a 32 MiB all_reduce and all_gather into a
    # registered tensor store straight into the peers' outputs on cuda_ipc;
    # the other transports raise.
    win = torch.zeros(16 << 20, device=dev)
    if backend.device_transport == "cuda_ipc":
        backend.register_window(win)
        part = win[: 8 << 20]  # 32 MiB at offset 0 on every rank
        part.copy_(d(rank, 8 << 20))
        dist.all_reduce(part)
        expect_equal(part, sum(data(r, 8 << 20) for r in ranks), "all_reduce into a window")
        chunk = (16 << 20) // size
        dist.all_gather_into_tensor(win[: chunk * size], d(rank, chunk, offset=3))
        expect_equal(win[: chunk * size], torch.cat([data(r, chunk, offset=3) for r in ranks]),
                     "all_gather into a window")
        backend.deregister_window(win)
    else:
        try:
            backend.register_window(win)
            check(False, f"register_window on {backend.device_transport} did not raise")
        except RuntimeError as e:
            check("no symmetric windows" in str(e), f"register_window raised {e}")
    dist.barrier()

    dist.destroy_process_group()
    if failures:
        for f in failures:
            print(f"rank {rank}: FAIL: {f}")
        print(f"rank {rank}: {len(failures)} of {checks} checks failed")
        return 1
    print(f"rank {rank}: {checks} checks passed on CUDA tensors, transport "
          f"{backend.device_transport}, torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
