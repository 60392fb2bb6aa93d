"""AdaDelta (m = momentum):
h1 = m·h1 + (1 − m)·g²;  u = g·sqrt((h2 + delta) / (h1 + delta));  h2 = m·h2 + (1 − m)·u²;
step = lr·u.  History: [h1 of every parameter] + [h2 of every parameter]."""

from __future__ import annotations

from caffe.solvers.registry import register_solver
from caffe.solvers.sgd import ParamSpan, SGDSolver


@register_solver("AdaDelta")
class AdaDeltaSolver(SGDSolver):
    history_sets = 2

    def compute_update_value(self, span: ParamSpan, rate: float) -> None:
        momentum, delta = self.param.momentum, self.param.delta
        grad, (grad_sq, update_sq) = span.diff, span.history
        grad_sq.mul_(momentum).addcmul_(grad, grad, value=1.0 - momentum)
        grad.mul_(((update_sq + delta) / (grad_sq + delta)).sqrt_())
        update_sq.mul_(momentum).addcmul_(grad, grad, value=1.0 - momentum)
        grad.mul_(rate * span.lr_mult)
