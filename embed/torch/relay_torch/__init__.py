"""relay as a torch.distributed backend.

    import relay_torch  # registers backend "relay"
    torch.distributed.init_process_group(backend="relay")

Ranks are processes (torchrun, or RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT
set by hand); relay rendezvouses through torch's store. The transport is
RELAY_TRANSPORT (ucx by default: shared memory, TCP or InfiniBand, as UCX
chooses; nccl for CUDA tensors, with the extension built against a CUDA
torch by embed/torch/build_against_torch.py). See embed/torch/process_group_relay.h for
what each collective accepts.
"""
import torch.distributed as _dist

from . import _relay_torch  # noqa: E402  (needs torch.distributed first)

ProcessGroupRelay = _relay_torch.ProcessGroupRelay


def _create(store, rank, world_size, timeout):
    return _relay_torch.create_process_group(store, rank, world_size, timeout)


if not hasattr(_dist.Backend, "RELAY"):
    try:  # torch 2.x: say which devices (relay takes host and CUDA tensors)
        _dist.Backend.register_backend("relay", _create, devices=["cpu", "cuda"])
    except TypeError:  # torch 1.x has no `devices`
        _dist.Backend.register_backend("relay", _create)
