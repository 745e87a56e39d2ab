"""One rank of the torch backend test; run under torchrun (backend_test.sh).

Every collective torch.distributed offers on backend="relay" runs on data
distinct per rank and element and is checked element by element against
what it must produce; then bad input must raise at the call and leave the
group usable, and a subgroup (torch's new_group) must work. Prints
"rank R: N checks passed" and exits 0, or lists the failures and exits 1.
"""
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
    ok = got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
    check(ok, f"{what}: got {got.flatten()[:6].tolist()}..., want {want.flatten()[:6].tolist()}...")


def data(rank, n, dtype=torch.float32, offset=0):
    """Distinct per rank and element; exact in float16 sums of a few ranks."""
    return ((torch.arange(n) % 13) + 16 * (rank + 1) + offset).to(dtype)


def expect_raises(fn, needle, what):
    try:
        fn()
    except RuntimeError as e:
        check(needle in str(e), f"{what}: error {str(e)[:200]!r} lacks {needle!r}")
        return
    check(False, f"{what}: no error raised")


def main():
    dist.init_process_group(backend="relay")
    rank, size = dist.get_rank(), dist.get_world_size()
    check(dist.get_backend() == "relay", f"backend is {dist.get_backend()}")
    n = 37
    ranks = range(size)

    # all_reduce: several ops and dtypes.
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16,
                  torch.int32, torch.int64, torch.int8, torch.uint8):
        # 8-bit sums stay in range for up to 8 ranks.
        scale = 8 if dtype in (torch.int8, torch.uint8) else 1
        t = (data(rank, n, torch.float64) // scale).to(dtype)
        dist.all_reduce(t)
        want = sum(data(r, n, torch.float64) // scale for r in ranks).to(dtype)
        expect_equal(t, want, f"all_reduce sum {dtype}")
    # data() grows with the rank; max and min need inputs whose largest and
    # smallest element comes from a different rank element by element.
    def mixed(r):
        return ((torch.arange(n) * 7 + r * 5) % 17 + 1).to(torch.float32) + r / 8

    everyone = torch.stack([mixed(r) for r in ranks])
    t = mixed(rank)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    expect_equal(t, everyone.max(dim=0).values, "all_reduce max")
    t = mixed(rank)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    expect_equal(t, everyone.min(dim=0).values, "all_reduce min")
    t = data(rank, n, torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
    want = torch.ones(n, dtype=torch.int64)
    for r in ranks:
        want *= data(r, n, torch.int64)
    expect_equal(t, want, "all_reduce product")
    t = data(rank, n, torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    want = sum(data(r, n, torch.float64) for r in ranks) / size
    check(torch.allclose(t, want), "all_reduce avg")

    # Async: the Work and its future.
    t = data(rank, n)
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()
    work.wait()
    check(work.is_completed() and work.is_success(), "async work completed")
    want = sum(data(r, n) for r in ranks)
    expect_equal(t, want, "async all_reduce")
    expect_equal(fut.wait()[0], want, "future value")

    # broadcast from the last rank; reduce to rank 1 % size.
    t = data(rank, n)
    dist.broadcast(t, src=size - 1)
    expect_equal(t, data(size - 1, n), "broadcast")
    root = 1 % size
    t = data(rank, n)
    dist.reduce(t, dst=root)
    if rank == root:
        expect_equal(t, sum(data(r, n) for r in ranks), "reduce")

    # all_gather: list and tensor forms; gather to the last rank.
    outs = [torch.zeros(n) for _ in ranks]
    dist.all_gather(outs, data(rank, n))
    for r in ranks:
        expect_equal(outs[r], data(r, n), f"all_gather block {r}")
    flat = torch.zeros(n * size)
    dist.all_gather_into_tensor(flat, data(rank, n))
    expect_equal(flat, torch.cat([data(r, n) for r in ranks]), "all_gather_into_tensor")
    last = size - 1
    gathered = [torch.zeros(n) for _ in ranks] if rank == last else None
    dist.gather(data(rank, n), gather_list=gathered, dst=last)
    if rank == last:
        for r in ranks:
            expect_equal(gathered[r], data(r, n), f"gather block {r}")

    # reduce_scatter: list and tensor forms; scatter from rank 0.
    out = torch.zeros(n)
    dist.reduce_scatter(out, [data(rank, n, offset=100 * j) for j in ranks])
    expect_equal(out, sum(data(r, n, offset=100 * rank) for r in ranks), "reduce_scatter")
    out = torch.zeros(n)
    dist.reduce_scatter_tensor(out, torch.cat([data(rank, n, offset=100 * j) for j in ranks]))
    expect_equal(out, sum(data(r, n, offset=100 * rank) for r in ranks), "reduce_scatter_tensor")
    out = torch.zeros(n)
    dist.scatter(out, [data(0, n, offset=100 * j) for j in ranks] if rank == 0 else None, src=0)
    expect_equal(out, data(0, n, offset=100 * rank), "scatter")

    # all_to_all: even, uneven splits, and the list form. Rank r sends
    # (j + 1) rows to rank j in the uneven case.
    inp = torch.cat([data(rank, 4, offset=100 * j) for j in ranks])
    out = torch.zeros(4 * size)
    dist.all_to_all_single(out, inp)
    expect_equal(out, torch.cat([data(i, 4, offset=100 * rank) for i in ranks]), "all_to_all_single even")
    inp = torch.cat([data(rank, j + 1, offset=100 * j) for j in ranks])
    out = torch.zeros((rank + 1) * size)
    dist.all_to_all_single(out, inp, output_split_sizes=[rank + 1] * size,
                           input_split_sizes=[j + 1 for j in ranks])
    expect_equal(out, torch.cat([data(i, rank + 1, offset=100 * rank) for i in ranks]),
                 "all_to_all_single uneven")
    outs = [torch.zeros(3) for _ in ranks]
    dist.all_to_all(outs, [data(rank, 3, offset=100 * j) for j in ranks])
    for i in ranks:
        expect_equal(outs[i], data(i, 3, offset=100 * rank), f"all_to_all block {i}")

    # Point to point around a ring, blocking and not; then a barrier.
    if size > 1:
        nxt, prev = (rank + 1) % size, (rank - 1) % size
        got = torch.zeros(n)
        reqs = [dist.irecv(got, src=prev, tag=5), dist.isend(data(rank, n), dst=nxt, tag=5)]
        for req in reqs:
            req.wait()
        expect_equal(got, data(prev, n), "isend/irecv")
        if rank % 2 == 0:
            dist.send(data(rank, n), dst=nxt)
            dist.recv(got, src=prev)
        else:
            dist.recv(got, src=prev)
            dist.send(data(rank, n), dst=nxt)
        expect_equal(got, data(prev, n), "send/recv")
    dist.barrier()

    # Bad input raises at the call; nothing is sent, so the group still works.
    expect_raises(lambda: dist.all_reduce(torch.zeros(4, 4).t()), "contiguous", "non-contiguous")
    expect_raises(lambda: dist.all_reduce(torch.zeros(4, dtype=torch.bool)), "not supported", "bool")
    expect_raises(lambda: dist.all_reduce(torch.zeros(4), op=dist.ReduceOp.BAND), "not supported", "BAND")
    expect_raises(lambda: dist.all_gather([torch.zeros(n)], data(rank, n)) if size > 1 else
                  dist.all_gather([torch.zeros(n)] * 2, data(rank, n)), "one per rank", "short list")
    if size > 1:
        expect_raises(lambda: dist.send(data(rank, n), dst=(rank + 1) % size, tag=-1),
                      "tag", "negative tag")
    t = data(rank, n)
    dist.all_reduce(t)
    expect_equal(t, sum(data(r, n) for r in ranks), "all_reduce after refused calls")

    # Metrics: the default group is relay's, and counts this all_reduce.
    pg = dist.distributed_c10d._get_default_group()

    def all_reduces():
        for line in pg.metrics_text().splitlines():
            if line.startswith("relay_collective_operations_total{") and 'collective="all_reduce"' in line:
                return int(line.rsplit(" ", 1)[1])
        return 0

    before = all_reduces()
    dist.all_reduce(data(rank, n))
    expect_equal(torch.tensor([all_reduces() - before]), torch.tensor([1]),
                 "metrics count one more all_reduce")
    expect_equal(torch.tensor([before >= 1]), torch.tensor([True]), "metrics saw earlier all_reduces")

    # A subgroup: torch builds another relay process group for it.
    evens = list(range(0, size, 2))
    group = dist.new_group(evens)
    if rank in evens:
        t = data(rank, n)
        dist.all_reduce(t, group=group)
        expect_equal(t, sum(data(r, n) for r in evens), "subgroup all_reduce")

    dist.barrier()
    dist.destroy_process_group()
    if failures:
        for f in failures:
            print(f"rank {rank}: FAIL: {f}")
        print(f"rank {rank}: {len(failures)} of {checks} checks failed")
        return 1
    print(f"rank {rank}: {checks} checks passed on transport "
          f"{os.environ.get('RELAY_TRANSPORT', 'ucx')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
