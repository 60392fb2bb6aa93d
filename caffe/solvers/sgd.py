"""SGD with momentum, and the update sequence every rule shares (Caffe's SGDSolver).

apply_update():  rate = get_learning_rate(); log it on display iterations;
                 clip_gradients()                       (global L2 norm of all diffs)
                 update_hook(rate) if set, else:
                     update_param(i, rate) for each learnable parameter i
                     net.update()                       (data -= diff)
                 iter += 1
update_param(i): normalize (diff /= iter_size), regularize (L2: diff += decay·w,
                 L1: diff += decay·sign(w)), compute_update_value (the rule: leaves the
                 step to subtract in the diff). Rules override only compute_update_value.

SGD's rule is Caffe's momentum form: h = momentum·h + lr·g; step = h.
"""

from __future__ import annotations

import logging

import torch

from caffe.common import root_solver
from caffe.errors import SolverError
from caffe.lr_policy import learning_rate
from caffe.solver import Solver
from caffe.solver_log import cpp_float
from caffe.solvers.registry import register_solver

_log = logging.getLogger("caffe")


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
        if self.param.lr_policy == "multistep" and step != self.current_step and root_solver():
            _log.info("MultiStep Status: Iteration %d, step = %d", self.iter, step)
        self.current_step = step
        return rate

    def apply_update(self) -> None:
        self.net.claim_params_on_device()  # the steps below write the flat buffers directly
        rate = self.get_learning_rate()
        display = self.param.display
        if display and self.iter % display == 0 and root_solver():
            _log.info("Iteration %d, lr = %s", self.iter, cpp_float(rate))
        self.clip_gradients()
        if self.update_hook is not None:
            self.update_hook(rate)
        else:
            for param_id in range(len(self.net.learnable_params)):
                self.update_param(param_id, rate)
            self.net.update()
        self.iter += 1

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
        self.normalize(param_id)
        self.regularize(param_id)
        self.compute_update_value(param_id, rate)

    def normalize(self, param_id: int) -> None:
        if self.param.iter_size > 1:
            self.net.learnable_params[param_id].diff_tensor.mul_(1.0 / self.param.iter_size)

    def regularize(self, param_id: int) -> None:
        local_decay = self.param.weight_decay * self.net.params_weight_decay[param_id]
        if not local_decay:
            return
        blob = self.net.learnable_params[param_id]
        kind = self.param.regularization_type
        if kind == "L2":
            blob.diff_tensor.add_(blob.data_tensor, alpha=local_decay)
        elif kind == "L1":
            blob.diff_tensor.add_(torch.sign(blob.data_tensor), alpha=local_decay)
        else:
            raise SolverError(
                f"Unknown regularization type: '{kind}' (solver field regularization_type; "
                "known: L2, L1)"
            )

    def local_rate(self, param_id: int, rate: float) -> float:
        return rate * self.net.params_lr[param_id]

    def compute_update_value(self, param_id: int, rate: float) -> None:
        grad = self.net.learnable_params[param_id].diff_tensor
        history = self.history[param_id]
        history.mul_(self.param.momentum).add_(grad, alpha=self.local_rate(param_id, rate))
        grad.copy_(history)
