"""Test passes and display lines (docs/caffe_format.md §4.2, §7.1, §10 item 8): when tests
run, what the log says and how numbers are printed."""

import re
import time

import numpy as np
import pytest

import caffe
from caffe.formats.proto_io import parse_net_text
from caffe.solvers.log import cpp_float
from tests.caffe.solver_harness import (
    B0,
    W0,
    make_solver,
    make_solver_at_w0,
    net_text,
    recorded_log,
    softmax_gradients,
)

BASE = "base_lr: 0.1\nmomentum: 0.9\nlr_policy: 'fixed'\nsnapshot_after_train: false\n"


def iterations_tested(log: list[str]) -> list[tuple[int, int]]:
    found = (re.fullmatch(r"Iteration (\d+), Testing net \(#(\d+)\)", m) for m in log)
    return [(int(m[1]), int(m[2])) for m in found if m]


@pytest.mark.parametrize(
    "fields, run, expected",
    [
        ("max_iter: 5", "solve", [0, 2, 4]),
        ("max_iter: 6", "solve", [0, 2, 4, 6]),  # once more after max_iter
        ("max_iter: 6\ntest_initialization: false", "solve", [2, 4, 6]),
        ("max_iter: 6", "step4", [0, 2]),  # step() alone never tests after its last update
    ],
)
def test_when_tests_run(tmp_path, fields, run, expected):
    solver = make_solver(tmp_path, BASE + f"test_iter: 1\ntest_interval: 2\n{fields}\n")
    with recorded_log() as log:
        solver.solve() if run == "solve" else solver.step(4)
    assert iterations_tested(log) == [(i, 0) for i in expected]


def test_every_test_net_is_tested_in_order(tmp_path):
    text = BASE + "test_iter: 1\ntest_iter: 2\ntest_interval: 3\nmax_iter: 3\n"
    solver = make_solver(tmp_path, text)
    with recorded_log() as log:
        solver.solve()
    assert iterations_tested(log) == [(0, 0), (0, 1), (3, 0), (3, 1)]


@pytest.mark.parametrize("loss_weight", [None, 2.5])
def test_test_outputs_are_means_with_loss_weight_suffix(tmp_path, loss_weight):
    text = BASE + "test_iter: 3\ntest_interval: 1\ntest_compute_loss: true\n"
    solver = make_solver_at_w0(tmp_path, text, net_text(loss_weight=loss_weight))
    with recorded_log() as log:
        solver.test_all()
    weight = 1.0 if loss_weight is None else loss_weight
    loss, _, _ = softmax_gradients(W0, B0)
    head, total, output = log
    assert head == "Iteration 0, Testing net (#0)"
    # The test net shares the train net's weights; all 3 batches are equal, so the mean
    # output is the one-batch loss, and the net's loss is weight · output.
    assert float(total.removeprefix("Test loss: ")) == pytest.approx(weight * loss, rel=1e-5)
    match = re.fullmatch(r"    Test net output #0: loss = (\S+) \(\* (\S+) = (\S+) loss\)", output)
    assert match, output
    assert float(match[1]) == pytest.approx(loss, rel=1e-5)
    assert match[2] == cpp_float(weight)
    assert float(match[3]) == pytest.approx(weight * loss, rel=1e-5)


def test_display_lines_have_caffes_wording(tmp_path):
    solver = make_solver(tmp_path, BASE + "display: 2\nmax_iter: 4\n")
    with recorded_log() as log:
        solver.solve()
    number = r"[-+]?[\d.]+(?:e[-+]\d+)?"
    patterns = [
        "Solving tiny",
        "Learning Rate Policy: fixed",
        rf"Iteration 0 \({number} iter/s, {number}s/2 iters\), loss = {number}",
        rf"    Train net output #0: loss = {number} \(\* 1 = {number} loss\)",
        "Iteration 0, lr = 0.1",
        rf"Iteration 2 \({number} iter/s, {number}s/2 iters\), loss = {number}",
        rf"    Train net output #0: loss = {number} \(\* 1 = {number} loss\)",
        "Iteration 2, lr = 0.1",
        rf"Iteration 4, loss = {number}",
        "Optimization Done.",
    ]
    assert len(log) == len(patterns), log
    for message, pattern in zip(log, patterns):
        assert re.fullmatch(pattern, message), (message, pattern)


@pytest.mark.parametrize(
    "value, text",
    [
        (0.01, "0.01"), (0.1, "0.1"), (1e-5, "1e-05"), (2.302585093, "2.30259"),
        (123456789.0, "1.23457e+08"), (100000.0, "100000"), (1e6, "1e+06"),
        (0.00992565, "0.00992565"), (1.0, "1"), (-0.0, "-0"), (float("inf"), "inf"),
    ],
)  # fmt: skip
def test_numbers_print_like_a_cpp_ostream(value, text):
    assert cpp_float(value) == text


def test_share_weights_makes_a_net_see_the_trained_weights(tmp_path):
    solver = make_solver(tmp_path, BASE)
    net_param = parse_net_text(net_text())
    net_param.state.phase = caffe.TEST
    other = caffe.Net(net_param)
    solver.share_weights(other)
    solver.step(2)
    for mine, theirs in zip(solver.net.learnable_params, other.learnable_params):
        np.testing.assert_array_equal(mine.data, theirs.data)


def test_pycaffe_members(tmp_path):
    solver = make_solver(tmp_path, BASE + "test_iter: 1\ntest_interval: 10\nmax_iter: 7\n")
    assert isinstance(solver, caffe.SGDSolver)
    assert solver.param.max_iter == 7 and len(solver.test_nets) == 1
    solver.param.base_lr = 0.5
    assert solver.lr == pytest.approx(0.5)
    assert solver.iter == 0
    solver.step(2)
    assert solver.iter == 2


def test_timer_measures_milliseconds():
    timer = caffe.Timer()
    assert timer.ms == 0.0  # never started: 0 (and a warning), as Caffe
    timer.start()
    time.sleep(0.02)
    timer.stop()
    assert 15 <= timer.ms < 2000
    assert timer.seconds == pytest.approx(timer.ms / 1e3)
    timer.start()
    assert timer.running
    assert timer.ms >= 0 and not timer.running  # reading stops a running timer
