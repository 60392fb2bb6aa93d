"""Each sync unit's share of a backward pass, timed on a copy of the model: what the cost
model's schedule lets a unit's transfer hide behind (cost_model.h, Note [measured costs];
schedule.h, Note [schedule]).

Only a job whose plan is ranked by time asks for it (the link's rate is known). As for K
(units.py, Note [measuring K]) the model itself is left untouched: a deep copy on the same
device runs forward and backward twice on the first input — the first untimed — with the
RNG restored after, and a unit's share is the time from the previous unit's last gradient
(or the start of backward) to its own last one. A model whose forward the copy cannot run,
or whose output holds no differentiable tensor, gets no times (the schedule then sees no
overlap, as the per-layer model does).
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_leaves

from poseidon.torch.units import SyncUnit, copy_inputs, copy_model, rng_kept


def measure_unit_backward(model: nn.Module, units: list[SyncUnit], args: tuple,
                          kwargs: dict) -> dict[int, float]:  # fmt: skip
    """Unit index -> seconds of the backward pass spent before its gradients were final."""
    try:
        with rng_kept():
            copied = copy_model(model, None)
            named = dict(copied.named_parameters(remove_duplicate=False))
            copied_params = {u.index: [named[n] for n in u.param_names] for u in units}
            _timed_backward(copied, copied_params, args, kwargs)  # warm-up: allocations
            return _timed_backward(copied, copied_params, args, kwargs)
    except Exception as e:  # a forward only the real model runs: the plan sees no overlap
        warnings.warn(f"poseidon: cannot time the backward pass on a copy of the model "
                      f"({type(e).__name__}: {e}); the plan is made as if no transfer "
                      "overlapped it", stacklevel=2)  # fmt: skip
        return {}


def _timed_backward(model: nn.Module, params: dict[int, list[nn.Parameter]], args: tuple,
                    kwargs: dict) -> dict[int, float]:  # fmt: skip
    device = next((p.device for ps in params.values() for p in ps), torch.device("cpu"))
    finished: dict[int, float] = {}
    left = {index: len(ps) for index, ps in params.items()}
    owners: dict[int, list[int]] = {}
    for index, ps in params.items():
        for p in ps:
            owners.setdefault(id(p), []).append(index)

    def done(param: torch.Tensor) -> None:
        for index in owners.get(id(param), ()):
            left[index] -= 1
            if left[index] == 0:
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                finished[index] = time.perf_counter()

    hooks = [p.register_post_accumulate_grad_hook(done)
             for p in {id(p): p for ps in params.values() for p in ps}.values()]  # fmt: skip
    try:
        model.zero_grad(set_to_none=True)
        copied_args, copied_kwargs = copy_inputs((args, kwargs), None)
        output: Any = model(*copied_args, **copied_kwargs)
        loss = sum(t.float().sum() for t in tree_leaves(output)
                   if isinstance(t, torch.Tensor) and t.requires_grad)  # fmt: skip
        if not isinstance(loss, torch.Tensor):
            return {}
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        loss.backward()
    finally:
        for hook in hooks:
            hook.remove()
    shares, mark = {}, start
    for index, at in sorted(finished.items(), key=lambda item: item[1]):
        shares[index], mark = at - mark, at
    return shares
