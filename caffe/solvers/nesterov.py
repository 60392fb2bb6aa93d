"""Nesterov's accelerated gradient in Caffe's form:
h_new = momentum·h + lr·g;  step = (1 + momentum)·h_new − momentum·h_old."""

from __future__ import annotations

import torch

from caffe.solvers.registry import register_solver
from caffe.solvers.sgd import ParamSpan, SGDSolver


@register_solver("Nesterov")
class NesterovSolver(SGDSolver):
    def compute_update_value(self, span: ParamSpan, rate: float) -> None:
        momentum = self.param.momentum
        grad, history = span.diff, span.history[0]
        previous = history.clone()
        history.mul_(momentum).add_(grad, alpha=rate * span.lr_mult)
        torch.mul(history, 1.0 + momentum, out=grad)
        grad.sub_(previous, alpha=momentum)
