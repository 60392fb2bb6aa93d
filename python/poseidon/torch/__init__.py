"""Poseidon for plain PyTorch: WFBP and HybComm (exact sufficient factors for nn.Linear) for
any torch.nn model, as a drop-in beside torch.nn.parallel.DistributedDataParallel.

    import poseidon.torch
    model = poseidon.torch.DistributedDataParallel(model)

Run with `poseidon launch -n 4 -- python train.py` or `torchrun --nproc-per-node 4 train.py`
(docs/pytorch.md)."""

from poseidon.sync.job import JoinError
from poseidon.torch.ddp import DistributedDataParallel

__all__ = ["DistributedDataParallel", "JoinError"]
