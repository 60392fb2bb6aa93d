"""Solver: builds the nets from a SolverParameter and runs Caffe's training loop
(docs/caffe_format.md §4).

The base class owns the sequence; the update rule is a subclass's business
(`caffe/solvers/`: SGDSolver implements `apply_update`, every other rule derives from it
and overrides `compute_update_value`). One iteration of `step` (`iter` counts completed
updates):

    1. clear the parameter diffs
    2. if test_interval and iter % test_interval == 0 and (iter > 0 or test_initialization):
       test every test net (root solver only)
    3. callbacks' on_start()
    4. iter_size forward/backward passes (gradients accumulate), loss = their mean;
       divergence.check: a non-finite loss or gradient warns, nonfinite_limit in a row stop
    5. smoothed loss over the last average_loss iterations; display lines on display iters
    6. callbacks' on_gradients_ready()    (where distributed training averages gradients)
    7. apply_update(): lr, clip, normalize, regularize, rule, net update, ++iter
    8. snapshot when iter % snapshot == 0 or an action asks for one; stop if asked

Hooks for distributed training (caffe/parallel/; each a single slot that refuses a second
attacher, caffe/training_hooks.py):
    solver.update_hook(rate)  if set, replaces the per-parameter update and the net update
                              inside apply_update (after clipping, before ++iter), so that a
                              layer's update can run when its gradient arrives
    solver.flush_hook()       if set, called before every test pass, before every snapshot
                              and when step()/solve() ends, so deferred updates complete first
    solver.action_hook(action, at_boundary)
                              if set, gets every requested action ("none" included): at the
                              end of each iteration (at_boundary) it returns the action to take
                              there, the one every worker agreed on; during a test pass it only
                              takes note (the job acts at an iteration's end)
    solver.snapshot_hook(state_file)
                              if set, called on every worker when the job snapshots (after
                              rank 0 wrote `state_file`): a worker's own state goes beside it
    solver.restore_hook(state_file)
                              if set, called after restore(state_file) (each worker's own
                              state is read back)

Compute mode: `solver_mode: GPU` selects the GPU `device_id` (CPU with one warning when no
CUDA device exists), unless the caller already chose a mode with caffe.set_mode_cpu() /
set_mode_gpu() (as the `caffe` command and pycaffe scripts do) or passes `mode="CPU"` /
`mode="GPU"` to the constructor; an explicit choice always wins.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import numpy as np
import torch

from caffe.common import (
    mode_chosen,
    root_solver,
    set_device,
    set_mode_cpu,
    set_mode_gpu,
    set_random_seed,
    solver_rank,
)
from caffe.errors import SolverError
from caffe.formats.proto_io import read_solver_param
from caffe.heap import lazy_zeros
from caffe.net import Net
from caffe.proto import caffe_pb2
from caffe.solvers.divergence import DivergenceGuard, check_nonfinite_limit
from caffe.solvers.log import cpp_float, log_outputs
from caffe.solvers.lr_policy import learning_rate
from caffe.solvers.nets import build_test_nets, build_train_net, require_train_net
from caffe.solvers.snapshot import SolverSnapshotMixin
from caffe.timer import Timer
from caffe.training_hooks import CallbackHandle, HookSlot, add_callback

_log = logging.getLogger("caffe")

ACTIONS = ("none", "stop", "snapshot")


def _info(message: str, *args: object) -> None:
    if root_solver():
        _log.info(message, *args, stacklevel=2)


def _source(solver: object) -> str | None:
    """The solver file's path, for messages; None for a SolverParameter."""
    return os.fspath(solver) if isinstance(solver, str | os.PathLike) else None


class _CallbackPair:
    """pycaffe's add_callback(on_start, on_gradients_ready) as one callback object."""

    def __init__(self, on_start: Callable[[], None], on_gradients_ready: Callable[[], None]):
        self.on_start = on_start
        self.on_gradients_ready = on_gradients_ready


class Solver(SolverSnapshotMixin):
    """Base of every solver. Construct with a solver prototxt path or a SolverParameter."""

    type_name = ""  # set by @register_solver
    history_sets = 0  # history blobs per learnable parameter (the rule's state)
    # Single slots of the distributed-training surface (caffe/training_hooks.py).
    update_hook: HookSlot[Callable[[float], None]] = HookSlot()
    flush_hook: HookSlot[Callable[[], None]] = HookSlot()
    action_hook: HookSlot[Callable[[str, bool], str]] = HookSlot()
    snapshot_hook: HookSlot[Callable[[str], None]] = HookSlot()
    restore_hook: HookSlot[Callable[[str], None]] = HookSlot()
    # Check every iteration's loss and gradients (caffe/solvers/divergence.py). A solver that
    # does no real arithmetic (the experiments' compute replay) turns it off: nothing can diverge,
    # and reading the gradient would cost time its profile does not hold.
    check_nonfinite = True

    def __init__(
        self, solver: str | os.PathLike | caffe_pb2.SolverParameter, *, mode: str | None = None
    ) -> None:
        self.param = self._read_param(solver)
        # Before anything else: an empty or net-less file would fail on its lr_policy first.
        require_train_net(self.param, _source(solver))
        _info("Initializing solver from parameters: \n%s", self.param)
        self.check_param()
        self._choose_mode(mode)
        self.iter = 0
        self.current_step = 0
        self.update_hook = None
        self.flush_hook = None
        self.action_hook = None
        self.snapshot_hook = None
        self.restore_hook = None
        self.requested_early_exit = False
        self.smoothed_loss = 0.0
        self._losses: list[float] = []
        self._callbacks: list = []
        self._action_function: Callable[[], str] | None = None
        self._iteration_timer = Timer()
        self._iterations_last = 0
        self.check_snapshot_write_permissions()
        self.sweep_stale_snapshot_files()
        if self.param.random_seed >= 0:
            set_random_seed(self.param.random_seed + solver_rank())
        self.net: Net = build_train_net(self.param)
        # Only the root solver tests, so only it builds (and opens the data of) test nets.
        self.test_nets: list[Net] = build_test_nets(self.param) if root_solver() else []
        self.divergence = DivergenceGuard(self.net, enabled=self.check_nonfinite)
        # The rule's state: per history set one flat buffer laid out as the net's parameter
        # buffers, so that a rule can update many parameters with one op (caffe/solvers/
        # sgd.py); `history` holds its per-parameter views, set by set (Caffe's order).
        self.history_buffers: list[torch.Tensor] = [
            lazy_zeros(self.net.param_data.numel(), self.net.param_data.device)
            for _ in range(self.history_sets)
        ]
        self.history: list[torch.Tensor] = [
            buffer[offset : offset + blob.count].view(blob.shape_tuple)
            for buffer in self.history_buffers
            for blob, offset in zip(self.net.learnable_params, self.net.learnable_param_offsets)
        ]
        _info("Solver scaffolding done.")

    # ----- construction -------------------------------------------------------------------
    @staticmethod
    def _read_param(solver) -> caffe_pb2.SolverParameter:  # type: ignore[no-untyped-def]
        if isinstance(solver, caffe_pb2.SolverParameter):
            param = caffe_pb2.SolverParameter()
            param.CopyFrom(solver)
            return param
        if isinstance(solver, str | os.PathLike):
            return read_solver_param(os.fspath(solver))
        raise TypeError(
            f"a solver needs a solver prototxt path or a SolverParameter, got {type(solver)}"
        )

    def check_param(self) -> None:
        """Reject settings that cannot run, before any net is built. Subclasses add rules."""
        p = self.param
        if p.average_loss < 1:
            raise SolverError(f"average_loss should be >= 1 (got {p.average_loss})")
        if p.iter_size < 1:
            raise SolverError(f"iter_size should be >= 1 (got {p.iter_size})")
        # Fails now (unknown policy, stepsize or max_iter it cannot use), not at iteration 0.
        learning_rate(p, 0, 0)
        if p.base_lr < 0 and root_solver():
            _log.warning(
                "base_lr is negative (%s): every update will climb the loss instead of "
                "descending it",
                cpp_float(p.base_lr),
            )
        if p.weight_decay and p.regularization_type not in ("L1", "L2"):
            raise SolverError(
                f"Unknown regularization type: '{p.regularization_type}' (solver field "
                "regularization_type; known: L2, L1)"
            )

    def _choose_mode(self, mode: str | None) -> None:
        if mode is not None:
            if mode.upper() not in ("CPU", "GPU"):
                raise ValueError(f"mode must be 'CPU' or 'GPU', got {mode!r}")
            use_gpu = mode.upper() == "GPU"
        elif mode_chosen():
            return  # the caller (CLI, pycaffe script) already chose
        else:
            use_gpu = self.param.solver_mode == caffe_pb2.SolverParameter.GPU
        if use_gpu:
            set_mode_gpu()
            set_device(self.param.device_id)
        else:
            set_mode_cpu()

    @property
    def type(self) -> str:
        return self.type_name

    @property
    def nonfinite_limit(self) -> int:
        """Consecutive iterations with a non-finite loss or gradient after which step()
        raises SolverError (default 10); 0 trains on regardless, as BVLC Caffe does.
        See caffe/solvers/divergence.py."""
        return self.divergence.limit

    @nonfinite_limit.setter
    def nonfinite_limit(self, limit: int) -> None:
        self.divergence.limit = check_nonfinite_limit(limit)

    # ----- callbacks and actions ------------------------------------------------------------
    def add_callback(self, on_start, on_gradients_ready=None) -> CallbackHandle:  # type: ignore[no-untyped-def]
        """add_callback(on_start, on_gradients_ready) or add_callback(obj) where obj has
        on_start() and on_gradients_ready() methods (pycaffe's two forms). Returns a handle
        whose remove() detaches it."""
        if on_gradients_ready is None:
            callback = on_start
            for name in ("on_start", "on_gradients_ready"):
                if not callable(getattr(callback, name, None)):
                    raise TypeError(f"a solver callback object needs a callable {name}()")
        else:
            callback = _CallbackPair(on_start, on_gradients_ready)
        return add_callback(self, "_callbacks", callback)

    def set_action_function(self, function: Callable[[], str] | None) -> None:
        """function() -> "none" | "stop" | "snapshot", asked every iteration and test batch."""
        self._action_function = function

    def requested_action(self) -> str:
        if self._action_function is None:
            return "none"
        action = str(self._action_function()).lower()
        if action not in ACTIONS:
            raise SolverError(f"action function returned {action!r}; expected one of {ACTIONS}")
        return action

    def _boundary_action(self) -> str:
        """The action at the end of an iteration; distributed training makes it the one
        that every worker takes here (action_hook)."""
        action = self.requested_action()
        if self.action_hook is not None:
            action = self.action_hook(action, True)
        return action

    def _flush(self) -> None:
        if self.flush_hook is not None:
            self.flush_hook()

    # ----- training --------------------------------------------------------------------------
    def solve(self, resume_file: str | None = None) -> None:
        """Train to max_iter (optionally resuming from a .solverstate), then snapshot and test."""
        _info("Solving %s", self.net.name)
        _info("Learning Rate Policy: %s", self.param.lr_policy)
        self.requested_early_exit = False
        if resume_file:
            self.restore(resume_file)
        start_iter = self.iter
        self.step(self.param.max_iter - self.iter)
        p = self.param
        if p.snapshot_after_train and (not p.snapshot or self.iter % p.snapshot):
            self._snapshot_everywhere()
        if self.requested_early_exit:
            _info("Optimization stopped early.")
            return
        if root_solver() and p.display and self.iter % p.display == 0:
            with torch.no_grad():
                loss = self.net.forward_prefilled()
            self._update_smoothed_loss(loss, start_iter)
            _info("Iteration %d, loss = %s", self.iter, cpp_float(self.smoothed_loss))
        if root_solver() and p.test_interval and self.iter % p.test_interval == 0:
            self.test_all()
        _info("Optimization Done.")

    def step(self, iters: int) -> None:
        """Run `iters` iterations of the training loop (fewer if an action stops it)."""
        p = self.param
        start_iter, stop_iter = self.iter, self.iter + int(iters)
        self.requested_early_exit = False  # a stop ends one step()/solve() call, not the solver
        self._losses = []
        self.smoothed_loss = 0.0
        self._iteration_timer.stop()  # time only this call, not the pause since the last one
        self._iteration_timer.start()
        self._iterations_last = self.iter
        while self.iter < stop_iter:
            self.net.clear_param_diffs()
            if (
                p.test_interval
                and self.iter % p.test_interval == 0
                and (self.iter > 0 or p.test_initialization)
            ):
                if root_solver():
                    self.test_all()
                if self.requested_early_exit:
                    break
            for callback in self._callbacks:
                callback.on_start()
            display = bool(p.display) and self.iter % p.display == 0
            self.net.debug_info = display and p.debug_info
            loss = 0.0
            for _ in range(p.iter_size):
                loss += self.net.forward_backward()
            loss /= p.iter_size
            self.divergence.check(self.iter, loss)  # warns, or raises after nonfinite_limit
            self._update_smoothed_loss(loss, start_iter)
            if display:
                self._display()
            for callback in self._callbacks:
                callback.on_gradients_ready()
            self.apply_update()
            action = self._boundary_action()
            periodic = bool(p.snapshot) and self.iter % p.snapshot == 0
            if periodic or action == "snapshot":
                self._snapshot_everywhere()
            if action == "stop":
                self.requested_early_exit = True
                break
        self._flush()

    def _snapshot_everywhere(self) -> None:
        """The job's snapshot: rank 0 writes it, then every worker's snapshot_hook keeps its
        own state beside it."""
        if root_solver():
            self.snapshot()
        if self.snapshot_hook is not None:
            self.snapshot_hook(self.snapshot_state_filename())

    def apply_update(self) -> None:
        raise NotImplementedError(f"{type(self).__name__}.apply_update")

    def subtract_diff(self, data: torch.Tensor, diff: torch.Tensor) -> None:
        """data -= diff, then diff = 0: Net.update for the parameters of one synchronised
        layer (caffe/parallel's deferred update), once its update is in `diff`."""
        data.sub_(diff)
        diff.zero_()

    def _update_smoothed_loss(self, loss: float, start_iter: int) -> None:
        """Mean of the last average_loss losses, kept incrementally in a ring (as Caffe)."""
        average = self.param.average_loss
        if len(self._losses) < average:
            self._losses.append(loss)
            n = len(self._losses)
            self.smoothed_loss = (self.smoothed_loss * (n - 1) + loss) / n
        else:
            index = (self.iter - start_iter) % average
            self.smoothed_loss += (loss - self._losses[index]) / average
            self._losses[index] = loss

    def _display(self) -> None:
        lapse = self._iteration_timer.seconds
        per_s = (self.iter - self._iterations_last) / (lapse if lapse else 1.0)
        _info(
            "Iteration %d (%s iter/s, %ss/%d iters), loss = %s",
            self.iter, cpp_float(per_s), cpp_float(lapse), self.param.display,
            cpp_float(self.smoothed_loss),
        )  # fmt: skip
        if root_solver():
            net = self.net
            outputs = net._outputs
            log_outputs(
                "Train",
                [net._blob_names[i] for i in outputs],
                [net._blobs[i].data for i in outputs],
                [net._blob_loss_weights[i] for i in outputs],
            )
        self._iteration_timer.start()
        self._iterations_last = self.iter

    # ----- testing ---------------------------------------------------------------------------
    def test_all(self) -> None:
        """Test every test net, unless an action stopped training."""
        self._flush()
        for test_net_id in range(len(self.test_nets)):
            if self.requested_early_exit:
                break
            self.test(test_net_id)

    def test(self, test_net_id: int = 0) -> None:
        """Run test_iter[i] forward passes of test net i and log the mean of every output."""
        _info("Iteration %d, Testing net (#%d)", self.iter, test_net_id)
        test_net = self.test_nets[test_net_id]
        test_net.share_with(self.net)
        num_iter = self.param.test_iter[test_net_id]
        outputs = test_net._outputs
        output_blobs = [test_net._blobs[i] for i in outputs]
        compute_loss = self.param.test_compute_loss
        scores: list[np.ndarray] | None = None
        loss = np.float32(0)
        with torch.no_grad():
            for _ in range(num_iter):
                if self._handle_test_actions():
                    break
                iter_loss = test_net.forward_prefilled()
                if compute_loss:
                    loss += np.float32(iter_loss)
                # Sums stay float32, as Caffe's Dtype accumulators; the first pass is copied.
                if scores is None:
                    scores = [blob.data.astype(np.float32).reshape(-1) for blob in output_blobs]
                else:
                    for score, blob in zip(scores, output_blobs):
                        score += blob.data.reshape(-1)
        if self.requested_early_exit:
            _info("Test interrupted.")
            return
        if compute_loss:
            _info("Test loss: %s", cpp_float(loss / np.float32(num_iter)))
        if root_solver() and scores is not None:
            log_outputs(
                "Test",
                [test_net._blob_names[i] for i in outputs],
                [s / np.float32(num_iter) for s in scores],
                [test_net._blob_loss_weights[i] for i in outputs],
            )

    def _handle_test_actions(self) -> bool:
        """Serve the pending actions (snapshot now, or stop); True if training must stop.

        Like Caffe, ask again until nothing is pending; each kind is served once, so an
        action function that keeps answering the same thing cannot spin here.
        """
        served: set[str] = set()
        action = self.requested_action()
        if self.action_hook is not None:
            # Only this worker tests: the job takes the action at the next iteration's end.
            self.action_hook(action, False)
            return self.requested_early_exit
        while action != "none" and action not in served:
            served.add(action)
            if action == "snapshot":
                self.snapshot()
            else:
                self.requested_early_exit = True
            action = self.requested_action()
        return self.requested_early_exit

    # ----- pycaffe helpers ------------------------------------------------------------------
    def share_weights(self, net: Net) -> None:
        """Make `net` use the train net's weights (by layer name), as test nets do."""
        net.share_with(self.net)
