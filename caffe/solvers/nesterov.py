"""Nesterov's accelerated gradient in Caffe's form:
h_new = momentum·h + lr·g;  step = (1 + momentum)·h_new − momentum·h_old."""

from __future__ import annotations

import torch

from caffe.solvers.registry import register_solver
from caffe.solvers.sgd import SGDSolver


@register_solver("Nesterov")
class NesterovSolver(SGDSolver):
    def compute_update_value(self, param_id: int, rate: float) -> None:
        momentum = self.param.momentum
        grad = self.net.learnable_params[param_id].diff_tensor
        history = self.history[param_id]
        previous = history.clone()
        history.mul_(momentum).add_(grad, alpha=self.local_rate(param_id, rate))
        torch.mul(history, 1.0 + momentum, out=grad)
        grad.sub_(previous, alpha=momentum)
