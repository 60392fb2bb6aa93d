"""How an SFB nn.Linear hands over its sufficient factors: its input x in forward, its output
gradient dy in backward — and computes no weight gradient of its own.

Note [factor capture]. The mean gradient of an SFB layer is rebuilt from every worker's
factors (unit_sync.py), so the layer's own weight gradient (K·M·N multiply-adds per step)
would be computed only to be thrown away. So while the layer's forward runs, its weight and
bias do not require grad (autograd then records no weight gradient), and the output goes
through `FactorTap`, an identity whose backward receives dy: it keeps (dy, x) in the unit's
FactorLog and says when every call of the layer this step has its dy — the moment the unit's
round can start (WFBP). The tap's output is a copy, not a view, so that an in-place op after
the layer (ReLU(inplace=True)) stays legal; it costs K·M floats, a 1/N of the layer's GEMM.
A private scalar that requires grad makes the tap's output require grad even when nothing
before it does (the first layer of a net), so that dy still arrives.

Anything else that gives the weight a gradient — the weight used outside the module's own
forward (nn.MultiheadAttention uses out_proj.weight directly) or shared with another module —
cannot travel as this layer's factors: the parameters' post-accumulate-grad hook sees it and
the step fails with what to do (force the layer to PS). The probe that measures K never sees
such a layer called, so BestScheme plans it PS anyway; this catches what `sfb_rows=` or
`layer_schemes=` forced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

_anchors: dict[torch.device, torch.Tensor] = {}


def _anchor(device: torch.device) -> torch.Tensor:
    if device not in _anchors:
        _anchors[device] = torch.zeros((), device=device, requires_grad=True)
    return _anchors[device]


class FactorTap(torch.autograd.Function):
    """y -> a copy of y; backward calls `received(key, dy)` and passes dy on."""

    @staticmethod
    def forward(
        ctx: Any,
        output: torch.Tensor,
        anchor: torch.Tensor,
        received: Callable[[int, torch.Tensor], None],
        key: int,
    ) -> torch.Tensor:
        ctx.received, ctx.key = received, key
        return output.clone()

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple:
        ctx.received(ctx.key, dy)
        return (dy if ctx.needs_input_grad[0] else None), None, None, None


class LinearCapture:
    """The forward pre- and post-hooks of one SFB nn.Linear. `remember(x)` keeps an input and
    returns its key; `received(key, dy)` gets its output gradient (both from FactorLog)."""

    def __init__(self, linear: nn.Linear, remember: Callable[[torch.Tensor], int],
                 received: Callable[[int, torch.Tensor], None]) -> None:  # fmt: skip
        self.linear = linear
        self.remember = remember
        self.received = received
        self._saved: list[tuple[nn.Parameter, bool]] | None = None

    def attach(self) -> list[Any]:
        """Register the hooks; returns their handles."""
        # always_call: a forward that raises must not leave the parameters frozen.
        return [self.linear.register_forward_pre_hook(self._before),
                self.linear.register_forward_hook(self._after, always_call=True)]  # fmt: skip

    def _before(self, module: nn.Module, inputs: tuple) -> None:
        if not torch.is_grad_enabled():
            return  # no backward can follow: nothing to capture
        params = [p for p in (self.linear.weight, self.linear.bias) if p is not None]
        if not any(p.requires_grad for p in params):
            return  # frozen by the user since: nothing to synchronise
        self._saved = [(p, p.requires_grad) for p in params]
        for p in params:
            p.requires_grad_(False)

    def _after(self, module: nn.Module, inputs: tuple, output: torch.Tensor) -> Any:
        if self._saved is None:
            return None
        for p, requires_grad in self._saved:
            p.requires_grad_(requires_grad)
        self._saved = None
        if output is None:  # the forward raised
            return None
        key = self.remember(inputs[0].detach())
        return FactorTap.apply(output, _anchor(output.device), self.received, key)
