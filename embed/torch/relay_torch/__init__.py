"""relay as a torch.distributed backend.

    import relay_torch  # registers backend "relay"
    torch.distributed.init_process_group(backend="relay")

Ranks are processes (torchrun, or RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT
set by hand); relay rendezvouses through torch's store. The transport is
RELAY_TRANSPORT (ucx by default: shared memory, TCP or InfiniBand, as UCX
chooses; nccl for CUDA tensors). See embed/torch/process_group_relay.h for
what each collective accepts.
"""
import torch.distributed as _dist

from . import _relay_torch  # noqa: E402  (needs torch.distributed first)

ProcessGroupRelay = _relay_torch.ProcessGroupRelay


def _create(store, rank, world_size, timeout):
    return _relay_torch.create_process_group(store, rank, world_size, timeout)


if not hasattr(_dist.Backend, "RELAY"):
    _dist.Backend.register_backend("relay", _create)
