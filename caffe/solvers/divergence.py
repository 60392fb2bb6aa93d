"""Divergence: non-finite losses and gradients are reported, and end training (issue 10).

BVLC Caffe trains on through NaN: a run whose base_lr is far too high logs `loss = nan`
for hours, exits 0 and writes NaN snapshots. The solver's DivergenceGuard instead

- warns at the first iteration of a run of non-finite ones, in one line naming the
  iteration and the culprit: the loss output (top blob with a loss weight) or, when the
  loss is finite, the layer parameter whose gradient is not;
- raises SolverError once `limit` CONSECUTIVE iterations were non-finite (default 10;
  0 never stops, BVLC's behaviour). Consecutive rather than total, because a long run may
  meet a rare bad batch (or a loss layer's transient inf) and recover; a diverged run
  never recovers (NaN weights stay NaN), so it reaches any small limit within `limit`
  iterations. Set with `caffe train --nonfinite_limit N` or `solver.nonfinite_limit = N`;
- refuses snapshots whose weights are non-finite (caffe/solvers/snapshot.py asks it).

Cost per iteration, Note [cheap check]: the loss is a Python float already (forward
returns one), so checking it is free. The gradients are screened with ONE reduction over
the flat diff buffer `net.param_diff` (all learnable diffs, caffe/net.py): its sum is
non-finite whenever any element is NaN or ±inf. A finite sum that overflows is a false
alarm, which the exact per-parameter pass that follows (run only when the screen fails)
clears. On CUDA reading the sum waits for backward to finish; measured in
docs/solver.md. Nothing else is checked per iteration (no per-blob walk).

In distributed training each worker checks its own loss and gradients (after its backward,
before they are averaged); a worker that stops raises, and the job's abort path ends the
others with its message.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import torch

from caffe.errors import SolverError

if TYPE_CHECKING:
    from caffe.net import Net

_log = logging.getLogger("caffe")
DEFAULT_NONFINITE_LIMIT = 10
# How many culprits a message names before it says "and N more".
_NAMED = 3


def check_nonfinite_limit(limit: object, what: str = "nonfinite_limit") -> int:
    """`limit` as a count >= 0, else SolverError naming `what`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise SolverError(
            f"{what} must be an integer >= 0 (consecutive non-finite iterations before "
            f"training stops; 0 never stops), got {limit!r}"
        )
    return limit


class DivergenceGuard:
    """Counts consecutive non-finite iterations of one solver's train net."""

    def __init__(
        self, net: Net, limit: int = DEFAULT_NONFINITE_LIMIT, enabled: bool = True
    ) -> None:
        self.net = net
        self.limit = check_nonfinite_limit(limit)
        self.enabled = enabled  # False: check() does nothing (snapshots are still checked)
        self.streak = 0  # consecutive non-finite iterations so far
        self._first = ""  # "iteration N: what", the streak's first, for the stop message
        self._param_names: list[str] | None = None

    # ----- every iteration ------------------------------------------------------------------
    def check(self, iteration: int, loss: float) -> None:
        """After the forward/backward passes of `iteration` (loss: their mean): warn at the
        first of a streak of non-finite iterations, raise SolverError at the limit."""
        if not self.enabled:
            return
        problem = self._problem(loss)
        if problem is None:
            self.streak = 0
            return
        self.streak += 1
        if self.streak == 1:
            self._first = f"iteration {iteration}: {problem}"
            stop = (
                f"training stops after {self.limit} consecutive non-finite iterations"
                if self.limit
                else "nonfinite_limit is 0: training goes on"
            )
            _log.warning("Iteration %d: %s (%s)", iteration, problem, stop)
        if self.limit and self.streak >= self.limit:
            raise SolverError(
                f"Iteration {iteration}: training diverged: the loss or gradient has been "
                f"non-finite for {self.streak} consecutive iterations (since {self._first}). "
                "Lower base_lr or set clip_gradients; --nonfinite_limit 0 "
                "(solver.nonfinite_limit = 0) trains on regardless, as BVLC Caffe does"
            )

    def _problem(self, loss: float) -> str | None:
        if not math.isfinite(loss):
            return f"loss = {loss}{self._loss_outputs()}"
        diff = self.net.param_diff
        if math.isfinite(float(torch.sum(diff))):  # Note [cheap check]
            return None
        bad = self._nonfinite_params(diff)
        if not bad:
            return None  # the sum overflowed; every gradient is finite
        return f"non-finite gradient of {self._describe(bad)}"

    def _loss_outputs(self) -> str:
        """ " in output 'loss'" for the loss tops that hold a non-finite value, if any do."""
        net = self.net
        names = [
            net._blob_names[i]
            for i in net._outputs
            if net._blob_loss_weights[i]
            and not bool(torch.isfinite(net._blobs[i].data_tensor).all())
        ]
        if not names:
            return ""  # e.g. only an earlier pass of iter_size was non-finite
        label = "output" if len(names) == 1 else "outputs"
        return f" in {label} " + ", ".join(f"'{n}'" for n in names)

    # ----- snapshots --------------------------------------------------------------------------
    def nonfinite_weights(self) -> str | None:
        """Why the weights must not be snapshotted ("the weights of ... are non-finite"), or
        None if every learnable parameter is finite."""
        # On CUDA, weights a pycaffe user wrote into a blob's host mirror reach the flat
        # device buffer only when claimed (once per snapshot: cheap).
        self.net.claim_params_on_device()
        data = self.net.param_data
        if math.isfinite(float(torch.sum(data))):
            return None
        bad = self._nonfinite_params(data)
        return f"the weights of {self._describe(bad)} are non-finite" if bad else None

    # ----- naming the culprits ------------------------------------------------------------------
    def _nonfinite_params(self, flat: torch.Tensor) -> list[int]:
        """Learnable parameter ids (net order) whose range of `flat` (param_data or
        param_diff) is not all finite."""
        net = self.net
        bad = []
        for param_id in range(len(net.learnable_params)):
            start = net.learnable_param_offsets[param_id]
            values = flat[start : start + net.learnable_params[param_id].count]
            if not bool(torch.isfinite(values).all()):
                bad.append(param_id)
        return bad

    def _describe(self, param_ids: list[int]) -> str:
        names = self._names()
        if len(param_ids) == len(names) > 1:
            return f"all {len(names)} learnable parameters"
        text = ", ".join(names[i] for i in param_ids[:_NAMED])
        more = len(param_ids) - _NAMED
        if more > 0:
            text += f" and {more} more"
        return f"{text} (of {len(names)} learnable parameters)"

    def _names(self) -> list[str]:
        """ "layer 'conv1' param 0" for every learnable parameter (its owner if shared)."""
        if self._param_names is None:
            net = self.net
            names = [""] * len(net.learnable_params)
            for net_id, (layer_id, param_id) in enumerate(net._param_layer_indices):
                if net._param_owners[net_id] < 0:
                    label = net._param_display_names[net_id]
                    param = f"param {label}" if label == str(param_id) else f"param '{label}'"
                    names[net._learnable_param_ids[net_id]] = (
                        f"layer '{net._layer_names[layer_id]}' {param}"
                    )
            self._param_names = names
        return self._param_names
