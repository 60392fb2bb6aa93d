"""Divergence (issue 10, item 6): a non-finite loss or gradient is warned about at the first
iteration of a streak, naming the loss output or the parameter; nonfinite_limit consecutive
ones stop training with SolverError (0: never); non-finite weights are never snapshotted."""

import math
import os

import numpy as np
import pytest

from caffe.errors import SolverError
from caffe.solvers.sgd import SGDSolver
from tests.caffe.solver_harness import (
    X,
    fill_inputs,
    make_solver,
    net_text,
    recorded_log,
    write_solver,
)

SOLVER = "base_lr: 0.1\nlr_policy: 'fixed'\nmomentum: 0.9\nmax_iter: 20\n"


def tiny(tmp_path, extra=""):
    return make_solver(tmp_path, SOLVER + f"snapshot_prefix: '{tmp_path}/snap'\n" + extra)


def nonfinite_warnings(log):
    return [m for m in log if "non-finite" in m or "loss = nan" in m]


def poison_gradients(solver, iterations, value=math.inf, param=1):
    """Put `value` into layer 'ip' param `param`'s gradient on `iterations`, after backward;
    zero every gradient before the update, so the weights stay finite (each iteration is
    judged on its own)."""
    net = solver.net
    ip = list(net._layer_names).index("ip")

    def after_backward(layer_index):
        if layer_index == ip and solver.iter in iterations:
            net.layers[ip].blobs[param].diff_tensor.fill_(value)

    net.after_backward(after_backward)
    solver.add_callback(lambda: None, lambda: net.param_diff.zero_())


def test_a_nan_loss_warns_once_then_stops_at_the_limit(tmp_path):
    solver = tiny(tmp_path)
    solver.nonfinite_limit = 3
    fill_inputs(solver.net, np.full_like(X, np.nan))
    with recorded_log() as log, pytest.raises(SolverError) as error:
        solver.step(10)
    assert nonfinite_warnings(log) == [
        "Iteration 0: loss = nan in output 'loss' (training stops after 3 consecutive "
        "non-finite iterations)"
    ]
    assert str(error.value) == (
        "Iteration 2: training diverged: the loss or gradient has been non-finite for 3 "
        "consecutive iterations (since iteration 0: loss = nan in output 'loss'). Lower base_lr "
        "or set clip_gradients; --nonfinite_limit 0 (solver.nonfinite_limit = 0) trains on "
        "regardless, as BVLC Caffe does"
    )
    assert solver.iter == 2  # the failing iteration's update was not applied


def test_a_gradient_names_its_layer_and_only_consecutive_iterations_count(tmp_path):
    solver = tiny(tmp_path)
    solver.nonfinite_limit = 3
    poison_gradients(solver, {0, 1, 3, 4, 5})
    with recorded_log() as log, pytest.raises(SolverError, match=r"^Iteration 5: .* for 3 "):
        solver.step(10)
    what = "non-finite gradient of layer 'ip' param 1 (of 2 learnable parameters)"
    assert nonfinite_warnings(log) == [
        f"Iteration {i}: {what} (training stops after 3 consecutive non-finite iterations)"
        for i in (0, 3)  # iteration 2 was finite: a new streak starts at 3
    ]


def test_limit_zero_trains_on_as_bvlc_caffe(tmp_path):
    solver = tiny(tmp_path)
    assert solver.nonfinite_limit == 10
    solver.nonfinite_limit = 0
    fill_inputs(solver.net, np.full_like(X, np.nan))
    with recorded_log() as log:
        solver.step(12)
    assert solver.iter == 12
    assert nonfinite_warnings(log) == [
        "Iteration 0: loss = nan in output 'loss' (nonfinite_limit is 0: training goes on)"
    ]


@pytest.mark.parametrize("bad", [-1, 2.5, "3", True])
def test_the_limit_must_be_a_count(tmp_path, bad):
    with pytest.raises(SolverError, match="nonfinite_limit must be an integer >= 0"):
        tiny(tmp_path).nonfinite_limit = bad


def test_an_overflowing_sum_of_finite_gradients_is_no_alarm(tmp_path):
    solver = tiny(tmp_path)
    solver.nonfinite_limit = 1
    poison_gradients(solver, {0, 1}, value=3e38, param=0)  # 6 of them sum past float32's max
    with recorded_log() as log:
        solver.step(2)
    assert nonfinite_warnings(log) == []


def test_nonfinite_weights_are_not_snapshotted(tmp_path):
    solver = tiny(tmp_path)
    solver.step(2)
    with recorded_log() as log:
        solver.snapshot()
    kept = f"{tmp_path}/snap_iter_2.solverstate"
    assert solver.last_snapshot == kept
    solver.net.params["ip"][0].data[0, 1] = np.inf
    solver.step(1)  # the inf weight makes the loss non-finite; limit 10 is far
    before = sorted(os.listdir(tmp_path))
    with recorded_log() as log:
        solver.snapshot()
    assert log == [
        "Iteration 3: not snapshotting: the weights of all 2 learnable parameters are "
        f"non-finite; the last snapshot, {kept}, is kept"
    ]
    assert sorted(os.listdir(tmp_path)) == before


def test_the_final_snapshot_of_a_stopped_run_is_refused_too(tmp_path):
    solver = tiny(tmp_path, "snapshot: 2\n")
    solver.nonfinite_limit = 0
    solver.set_action_function(lambda: "stop" if solver.iter == 5 else "none")
    poison = {3}
    net = solver.net
    net.after_backward(
        lambda i: solver.iter in poison and net.layers[i].blobs and net.param_diff.fill_(np.nan)
    )
    with recorded_log() as log:
        solver.solve()
    assert solver.iter == 5
    refusals = [m for m in log if "not snapshotting" in m]
    kept = f"the last snapshot, {tmp_path}/snap_iter_2.solverstate, is kept"
    assert [r.split(":")[0] for r in refusals] == ["Iteration 4", "Iteration 5"]
    assert all(r.endswith(kept) for r in refusals)
    assert not any("_iter_4." in n or "_iter_5." in n for n in os.listdir(tmp_path))


def test_a_solver_without_real_arithmetic_can_turn_the_check_off(tmp_path):
    class ReplayLike(SGDSolver):  # as poseidon.experiments.replay.ReplaySolver
        check_nonfinite = False

    solver = ReplayLike(write_solver(tmp_path, SOLVER, net_text()))
    fill_inputs(solver.net, np.full_like(X, np.nan))
    with recorded_log() as log:
        solver.step(12)
    assert solver.iter == 12 and nonfinite_warnings(log) == []
