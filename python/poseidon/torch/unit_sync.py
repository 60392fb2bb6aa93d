"""One sync unit's round, tied to torch.nn: the unit's .grad tensors into the core's round
(poseidon/sync/round.py) the moment its backward is done, and the mean of every worker's back
into .grad.

PS: the unit's .grad tensors are copied into one flat float32 range, the round's gradient
(registered with the comm core once; pinned host memory with a device twin on CUDA).
Parameters with no gradient this step (unused) count as zeros, so the job never waits for
them; one left unused on every worker keeps grad None.

SFB (an nn.Linear): the layer's input x (K × in) and output gradient dy (K × out) are kept
(factor_capture.py) — every call of the layer in the step, and every micro-batch of a
gradient accumulation (`no_sync`), stacked in the unit's FactorLog; the layer computes no
weight gradient of its own. The round sends [dy | x] (poseidon/sync/factors.py's layout) and
the unit rebuilds the exact mean gradient (1/P1) Σ_r dy_rᵀ x_r with one GEMM on the layer's
device, and the bias's from Σ dy, adding them to what .grad held before the backward (as
DDP's mean of accumulated grads).
"""

from __future__ import annotations

import torch
from torch import nn

from poseidon.sync.client import SyncClient
from poseidon.sync.factors import FactorLog
from poseidon.sync.layout import SyncLayer
from poseidon.sync.round import FactorOverflowError
from poseidon.torch.units import SyncUnit


class UnitSync:
    """The round of one unit for the current step. Not thread-safe: the autograd engine
    calls it from the thread that runs backward."""

    def __init__(self, unit: SyncUnit, layer: SyncLayer, scheme: str, client: SyncClient,
                 capacity_rows: int = 0) -> None:  # fmt: skip
        self.unit = unit
        self.scheme = scheme
        self.ready = 0  # parameters whose .grad is final for this backward
        self.factors: FactorLog | None = None
        self.flat: torch.Tensor | None = None
        if scheme != "SFB":  # PS, BF16, PowerSGD: the unit's gradients in one flat range
            self.flat = torch.zeros(unit.num_floats, dtype=torch.float32, device=client.device)
            self.round = client.dense_round(layer, self.flat)
        else:
            linear = unit.module
            assert isinstance(linear, nn.Linear)
            self.factors = FactorLog(linear.out_features, linear.in_features)
            self.round = client.sfb_round(layer, self.factors, capacity_rows, self._rebuild)

    @property
    def submitted(self) -> bool:
        return self.round.submitted

    # ----- sending --------------------------------------------------------------------------
    def submit(self, iteration: int, now_us: float = 0.0) -> None:
        """Hand this step's gradient (or factors) to the comm core (asynchronous); `now_us`
        is the time on the job's timeline, if it keeps one."""
        if self.flat is not None:
            offset = 0
            for p, name in zip(self.unit.params, self.unit.param_names):
                n = p.numel()
                target = self.flat[offset : offset + n]
                if p.grad is None:
                    target.zero_()
                elif p.grad.is_sparse:
                    raise RuntimeError(f"{name}: a sparse gradient (nn.Embedding(sparse=True) "
                                       "or similar), which poseidon.torch does not move; use "
                                       "dense gradients (sparse=False)")  # fmt: skip
                else:
                    target.copy_(p.grad.reshape(-1))
                offset += n
        try:
            self.round.submit(iteration, now_us)
        except FactorOverflowError as e:
            raise RuntimeError(
                f"nn.Linear {e}: plan it for that many rows (accumulation_steps= for gradient "
                "accumulation, or sfb_rows=) or send it through the parameter server "
                f"(layer_schemes={{{self.unit.name!r}: 'ps'}}) in DistributedDataParallel"
            ) from None

    # ----- receiving --------------------------------------------------------------------
    def finish(self, client: SyncClient) -> None:
        """Wait for the round and leave the mean of every worker's gradient in .grad."""
        self.ready = 0
        client.finish(self.round)
        if self.flat is None:
            return
        offset = 0
        for p in self.unit.params:
            n = p.numel()
            mean = self.flat[offset : offset + n].view(p.shape)
            offset += n
            _set_grad(p, mean)

    def _rebuild(self, dy: torch.Tensor, x: torch.Tensor, scale: float) -> None:
        """Add scale·dyᵀ·x into the Linear's weight .grad and scale·Σ dy into its bias's."""
        linear = self.unit.module
        params = [p for p in (linear.weight, linear.bias) if p is not None]
        grads = [_grad_for_adding(p) for p in params]
        grads[0].addmm_(dy.t(), x, alpha=scale)
        if len(grads) > 1:
            grads[1].add_(dy.sum(dim=0), alpha=scale)
        for p, g in zip(params, grads):
            if p.grad is None or p.grad is not g:
                p.grad = g.to(p.dtype)


def _grad_for_adding(param: nn.Parameter) -> torch.Tensor:
    """A float32 tensor holding param.grad (zeros if None) to add the rebuilt mean into: the
    grad itself when it is float32 already."""
    if param.grad is None:
        return torch.zeros(param.shape, dtype=torch.float32, device=param.device)
    if param.grad.dtype == torch.float32:
        return param.grad
    return param.grad.to(torch.float32)


def _set_grad(param: nn.Parameter, mean: torch.Tensor) -> None:
    """.grad := the mean; a parameter no worker used (no local grad, a zero mean) keeps None,
    as it would in one process."""
    if param.grad is None:
        if not bool(mean.any()):
            return
        param.grad = mean.to(param.dtype).clone()
        return
    param.grad.copy_(mean)
