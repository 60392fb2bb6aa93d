"""SGD with momentum, and the update sequence every rule shares (Caffe's SGDSolver).

apply_update():  rate = get_learning_rate(); log it on display iterations;
                 clip_gradients()                       (global L2 norm of all diffs)
                 update_hook(rate) if set, else:
                     update every learnable parameter   (below)
                     net.update()                       (data -= diff)
                 iter += 1
updating:        normalize (diff /= iter_size), regularize (L2: diff += decay·w,
                 L1: diff += decay·sign(w)), compute_update_value (the rule: leaves the
                 step to subtract in the diff). Rules override only compute_update_value.

The three steps run on a ParamSpan: flat views of the diff, the data and the rule's history
of one parameter or of several, with the one lr_mult and decay_mult they share. Every step
is elementwise, so a span of many parameters gets the very values, bit for bit, that
parameter-by-parameter updates would; only the number of ops differs. apply_update therefore
updates the runs of consecutive parameters with equal multipliers, one span each (a net
without param specs is one span: ~5 ops a step however many layers it has), while
update_param(i, rate) - Caffe's per-parameter form, which the distributed syncers call as
each layer's gradient arrives - updates one parameter. A subclass that replaces
update_param gets it called for every parameter, as in Caffe.

SGD's rule is Caffe's momentum form: h = momentum·h + lr·g; step = h.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import torch

from caffe.common import root_solver
from caffe.errors import SolverError
from caffe.solvers.log import cpp_float
from caffe.solvers.lr_policy import learning_rate
from caffe.solvers.registry import register_solver
from caffe.solvers.solver import Solver

_log = logging.getLogger("caffe")


class ParamSpan(NamedTuple):
    """Learnable parameters that share lr_mult and decay_mult, as views of equal shape."""

    diff: torch.Tensor
    data: torch.Tensor
    history: tuple[torch.Tensor, ...]  # one view per history set of the rule
    lr_mult: float
    decay_mult: float


@register_solver("SGD")
class SGDSolver(Solver):
    history_sets = 1

    @property
    def lr(self) -> float:
        """The learning rate for the current iteration (reading it changes nothing)."""
        return learning_rate(self.param, self.iter, self.current_step)[0]

    def get_learning_rate(self) -> float:
        """The rate for the current iteration; advances current_step for step/multistep."""
        rate, step = learning_rate(self.param, self.iter, self.current_step)
        if step != self.current_step and self.param.lr_policy == "multistep" and root_solver():
            _log.info("MultiStep Status: Iteration %d, step = %d", self.iter, step)
        self.current_step = step
        return rate

    def apply_update(self) -> None:
        net = self.net
        net.claim_params_on_device()  # the steps below write the flat buffers directly
        rate = self.get_learning_rate()
        display = self.param.display
        if display and self.iter % display == 0 and root_solver():
            _log.info("Iteration %d, lr = %s", self.iter, cpp_float(rate))
        self.clip_gradients()
        if self.update_hook is not None:
            self.update_hook(rate)
        elif type(self).update_param is not SGDSolver.update_param or "update_param" in vars(self):
            for param_id in range(len(net.learnable_params)):
                self.update_param(param_id, rate)
            net.update()
        else:
            for span in self.update_spans():
                self.update_span(span, rate)
            net.update()
        self.iter += 1

    # ----- the spans ------------------------------------------------------------------------
    def param_span(self, param_id: int) -> ParamSpan:
        """Learnable parameter `param_id` alone."""
        net = self.net
        blob = net.learnable_params[param_id]
        count = len(net.learnable_params)
        return ParamSpan(
            blob.diff_tensor,
            blob.data_tensor,
            tuple(self.history[k * count + param_id] for k in range(self.history_sets)),
            net.params_lr[param_id],
            net.params_weight_decay[param_id],
        )

    def update_spans(self) -> list[ParamSpan]:
        """Every learnable parameter, as runs of consecutive parameters with equal lr_mult
        and decay_mult (flat views of the net's and the history's buffers). Multipliers are
        fixed when the net is built, so the plan is made once."""
        spans = getattr(self, "_update_spans", None)
        if spans is None:
            spans = self._update_spans = self._plan_spans()
        return spans

    def _plan_spans(self) -> list[ParamSpan]:
        net = self.net
        runs: list[list] = []  # [start, end, lr_mult, decay_mult]
        for blob, offset, lr_mult, decay_mult in zip(
            net.learnable_params, net.learnable_param_offsets, net.params_lr,
            net.params_weight_decay,
        ):  # fmt: skip
            last = runs[-1] if runs else None
            if last and last[1] == offset and last[2] == lr_mult and last[3] == decay_mult:
                last[1] += blob.count
            else:
                runs.append([offset, offset + blob.count, lr_mult, decay_mult])
        return [
            ParamSpan(
                net.param_diff[start:end],
                net.param_data[start:end],
                tuple(buffer[start:end] for buffer in self.history_buffers),
                lr_mult,
                decay_mult,
            )
            for start, end, lr_mult, decay_mult in runs
        ]

    # ----- the steps --------------------------------------------------------------------------
    def clip_gradients(self) -> None:
        """Scale every diff by clip/‖g‖ when the global L2 norm ‖g‖ exceeds clip_gradients."""
        clip = self.param.clip_gradients
        if clip < 0:
            return
        # All learnable diffs live in one flat buffer: one norm, one scale.
        diffs = self.net.param_diff
        norm = float(torch.linalg.vector_norm(diffs))
        if norm > clip:
            scale = clip / norm
            if root_solver():
                _log.info(
                    "Gradient clipping: scaling down gradients (L2 norm %s > %s) by scale "
                    "factor %s",
                    cpp_float(norm), cpp_float(clip), cpp_float(scale),
                )  # fmt: skip
            diffs.mul_(scale)

    def update_param(self, param_id: int, rate: float) -> None:
        """Normalize, regularize and turn learnable parameter `param_id`'s diff into its step."""
        self.update_span(self.param_span(param_id), rate)

    def update_span(self, span: ParamSpan, rate: float) -> None:
        self.normalize(span)
        self.regularize(span)
        self.compute_update_value(span, rate)

    def normalize(self, span: ParamSpan) -> None:
        iter_size = self.param.iter_size
        if iter_size > 1:
            span.diff.mul_(1.0 / iter_size)

    def regularize(self, span: ParamSpan) -> None:
        local_decay = self.param.weight_decay * span.decay_mult
        if not local_decay:
            return
        kind = self.param.regularization_type
        if kind == "L2":
            span.diff.add_(span.data, alpha=local_decay)
        elif kind == "L1":
            span.diff.add_(torch.sign(span.data), alpha=local_decay)
        else:
            raise SolverError(
                f"Unknown regularization type: '{kind}' (solver field regularization_type; "
                "known: L2, L1)"
            )

    def compute_update_value(self, span: ParamSpan, rate: float) -> None:
        history = span.history[0]
        history.mul_(self.param.momentum).add_(span.diff, alpha=rate * span.lr_mult)
        span.diff.copy_(history)
