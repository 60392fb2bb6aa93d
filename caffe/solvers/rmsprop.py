"""RMSProp: h = rms_decay·h + (1 − rms_decay)·g²;  step = lr·g / (sqrt(h) + delta).
Momentum must be 0 and 0 ≤ rms_decay < 1."""

from __future__ import annotations

from caffe.errors import SolverError
from caffe.solvers.registry import register_solver
from caffe.solvers.sgd import ParamSpan, SGDSolver


@register_solver("RMSProp")
class RMSPropSolver(SGDSolver):
    def check_param(self) -> None:
        super().check_param()
        if self.param.momentum != 0:
            raise SolverError(
                f"Momentum cannot be used with RMSProp (solver momentum is {self.param.momentum})"
            )
        if not 0 <= self.param.rms_decay < 1:
            raise SolverError(
                f"rms_decay should lie between 0 and 1 (solver rms_decay is {self.param.rms_decay})"
            )

    def compute_update_value(self, span: ParamSpan, rate: float) -> None:
        decay = self.param.rms_decay
        grad, history = span.diff, span.history[0]
        history.mul_(decay).addcmul_(grad, grad, value=1.0 - decay)
        grad.div_(history.sqrt().add_(self.param.delta)).mul_(rate * span.lr_mult)
