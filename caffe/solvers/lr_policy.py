"""Learning-rate policies (SolverParameter.lr_policy), docs/caffe_format.md §4.3.

Each policy is a pure function of the solver parameters, the iteration and the current
step, returning (rate, current_step): the solver owns the state and decides what to log,
so reading the rate (pycaffe's `solver.lr`) never changes it.

    fixed      base_lr
    step       base_lr · γ^floor(iter / stepsize)            (current_step = floor(iter/stepsize))
    exp        base_lr · γ^iter
    inv        base_lr · (1 + γ·iter)^(−power)
    multistep  base_lr · γ^current_step; current_step advances by ONE per call while
               iter ≥ stepvalue[current_step] (Caffe's `if`, not `while`: on resume it
               catches up one step per iteration)
    poly       base_lr · (1 − iter/max_iter)^power
    sigmoid    base_lr / (1 + exp(−γ·(iter − stepsize)))
"""

from __future__ import annotations

import math
from collections.abc import Callable

from caffe.errors import SolverError
from caffe.proto import caffe_pb2

Policy = Callable[[caffe_pb2.SolverParameter, int, int], tuple[float, int]]


def _fixed(p: caffe_pb2.SolverParameter, it: int, step: int) -> tuple[float, int]:
    return p.base_lr, step


def _step(p: caffe_pb2.SolverParameter, it: int, step: int) -> tuple[float, int]:
    if p.stepsize <= 0:
        raise SolverError(f"lr_policy 'step' needs stepsize > 0 (got {p.stepsize})")
    step = it // p.stepsize
    return p.base_lr * p.gamma**step, step


def _exp(p: caffe_pb2.SolverParameter, it: int, step: int) -> tuple[float, int]:
    return p.base_lr * p.gamma**it, step


def _inv(p: caffe_pb2.SolverParameter, it: int, step: int) -> tuple[float, int]:
    return p.base_lr * (1.0 + p.gamma * it) ** (-p.power), step


def _multistep(p: caffe_pb2.SolverParameter, it: int, step: int) -> tuple[float, int]:
    if step < len(p.stepvalue) and it >= p.stepvalue[step]:
        step += 1
    return p.base_lr * p.gamma**step, step


def _poly(p: caffe_pb2.SolverParameter, it: int, step: int) -> tuple[float, int]:
    if p.max_iter <= 0:
        raise SolverError(f"lr_policy 'poly' needs max_iter > 0 (got {p.max_iter})")
    return p.base_lr * (1.0 - it / p.max_iter) ** p.power, step


def _sigmoid(p: caffe_pb2.SolverParameter, it: int, step: int) -> tuple[float, int]:
    exponent = -p.gamma * (it - p.stepsize)
    # exp overflows past ~709: the rate is then 0 to double precision.
    return (p.base_lr / (1.0 + math.exp(exponent)) if exponent < 700 else 0.0), step


POLICIES: dict[str, Policy] = {
    "fixed": _fixed,
    "step": _step,
    "exp": _exp,
    "inv": _inv,
    "multistep": _multistep,
    "poly": _poly,
    "sigmoid": _sigmoid,
}


def policy(name: str) -> Policy:
    """The policy function for `name`; an unknown name fails listing the known ones."""
    found = POLICIES.get(name)
    if found is None:
        raise SolverError(
            f"Unknown learning rate policy: '{name}' (solver field lr_policy). "
            f"Known policies: {', '.join(POLICIES)}"
        )
    return found


def learning_rate(
    param: caffe_pb2.SolverParameter, iteration: int, current_step: int
) -> tuple[float, int]:
    """(rate at `iteration`, the new current_step) under param.lr_policy."""
    return policy(param.lr_policy)(param, iteration, current_step)
