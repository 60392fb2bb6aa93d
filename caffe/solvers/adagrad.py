"""AdaGrad: h += g²;  step = lr·g / (sqrt(h) + delta). Momentum must be 0."""

from __future__ import annotations

from caffe.errors import SolverError
from caffe.solvers.registry import register_solver
from caffe.solvers.sgd import ParamSpan, SGDSolver


@register_solver("AdaGrad")
class AdaGradSolver(SGDSolver):
    def check_param(self) -> None:
        super().check_param()
        if self.param.momentum != 0:
            raise SolverError(
                f"Momentum cannot be used with AdaGrad (solver momentum is {self.param.momentum})"
            )

    def compute_update_value(self, span: ParamSpan, rate: float) -> None:
        grad, history = span.diff, span.history[0]
        history.addcmul_(grad, grad)
        grad.div_(history.sqrt().add_(self.param.delta)).mul_(rate * span.lr_mult)
