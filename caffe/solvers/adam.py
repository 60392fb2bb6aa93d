"""Adam (β1 = momentum, β2 = momentum2, ε = delta, t = iter + 1):
m = β1·m + (1 − β1)·g;  v = β2·v + (1 − β2)·g²;
step = lr·sqrt(1 − β2^t)/(1 − β1^t) · m / (sqrt(v) + ε).
History: [m of every parameter] + [v of every parameter]."""

from __future__ import annotations

import math

import torch

from caffe.solvers.registry import register_solver
from caffe.solvers.sgd import ParamSpan, SGDSolver


@register_solver("Adam")
class AdamSolver(SGDSolver):
    history_sets = 2

    def compute_update_value(self, span: ParamSpan, rate: float) -> None:
        beta1, beta2 = self.param.momentum, self.param.momentum2
        t = self.iter + 1
        correction = math.sqrt(1.0 - beta2**t) / (1.0 - beta1**t)
        grad, (m, v) = span.diff, span.history
        m.mul_(beta1).add_(grad, alpha=1.0 - beta1)
        v.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        torch.div(m, v.sqrt().add_(self.param.delta), out=grad)
        grad.mul_(rate * span.lr_mult * correction)
