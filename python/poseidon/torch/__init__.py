"""Poseidon for plain PyTorch: WFBP and HybComm (exact sufficient factors for nn.Linear) for
any torch.nn model, as a drop-in beside torch.nn.parallel.DistributedDataParallel.

    import poseidon.torch
    model = poseidon.torch.DistributedDataParallel(model)

Run with `poseidon launch -n 4 -- python train.py` or `torchrun --nproc-per-node 4 train.py`
(docs/pytorch.md)."""

from poseidon.torch.ddp import DistributedDataParallel
from poseidon.torch.session import JoinError

__all__ = ["DistributedDataParallel", "JoinError"]
