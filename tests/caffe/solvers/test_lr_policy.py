"""Every lr_policy at several iterations against its formula (docs/caffe_format.md §4.3)."""

import math

import numpy as np
import pytest

from caffe.errors import SolverError
from caffe.proto import caffe_pb2
from caffe.solvers.lr_policy import POLICIES, learning_rate
from tests.caffe.solver_harness import make_solver, recorded_log

ITERS = [0, 1, 7, 10, 99, 250, 1000]


def param(**fields) -> caffe_pb2.SolverParameter:
    return caffe_pb2.SolverParameter(base_lr=0.01, **fields)


def rate(p, it, step=0):
    return learning_rate(p, it, step)[0]


@pytest.mark.parametrize("it", ITERS)
def test_fixed(it):
    assert rate(param(lr_policy="fixed"), it) == pytest.approx(0.01)


@pytest.mark.parametrize("it", ITERS)
def test_step_sets_current_step(it):
    p = param(lr_policy="step", gamma=0.1, stepsize=100)
    value, step = learning_rate(p, it, 0)
    assert step == it // 100
    assert value == pytest.approx(0.01 * 0.1 ** (it // 100), rel=1e-6)


@pytest.mark.parametrize("it", ITERS)
def test_exp(it):
    gamma = float(np.float32(0.999))  # SolverParameter.gamma is a float field
    assert rate(param(lr_policy="exp", gamma=0.999), it) == pytest.approx(
        0.01 * gamma**it, rel=1e-6
    )


@pytest.mark.parametrize("it", ITERS)
def test_inv(it):
    # LeNet's schedule: gamma 1e-4, power 0.75.
    expected = 0.01 * (1 + 1e-4 * it) ** -0.75
    assert rate(param(lr_policy="inv", gamma=1e-4, power=0.75), it) == pytest.approx(
        expected, rel=1e-6
    )


@pytest.mark.parametrize("it", ITERS)
def test_poly(it):
    expected = 0.01 * (1 - it / 1000) ** 2
    p = param(lr_policy="poly", power=2.0, max_iter=1000)
    assert rate(p, it) == pytest.approx(expected, rel=1e-6, abs=1e-15)


@pytest.mark.parametrize("it", ITERS)
def test_sigmoid(it):
    expected = 0.01 / (1 + math.exp(0.05 * (it - 200)))  # gamma = -0.05: a decay
    assert rate(param(lr_policy="sigmoid", gamma=-0.05, stepsize=200), it) == pytest.approx(
        expected, rel=1e-6
    )


def test_multistep_advances_one_step_per_call():
    p = param(lr_policy="multistep", gamma=0.5)
    p.stepvalue.extend([3, 5])
    step = 0
    seen = []
    for it in range(8):
        value, step = learning_rate(p, it, step)
        seen.append((step, value))
    expected_steps = [0, 0, 0, 1, 1, 2, 2, 2]
    assert [s for s, _ in seen] == expected_steps
    assert [v for _, v in seen] == pytest.approx([0.01 * 0.5**s for s in expected_steps])
    # Resuming late with current_step 0 catches up one step per call, as Caffe's `if`.
    assert learning_rate(p, 100, 0)[1] == 1


def test_unknown_policy_names_it_and_the_known_ones():
    with pytest.raises(SolverError) as info:
        learning_rate(param(lr_policy="cosine"), 0, 0)
    message = str(info.value)
    assert "'cosine'" in message
    assert all(name in message for name in POLICIES)
    assert len(POLICIES) == 7


def test_unknown_policy_fails_at_solver_construction(tmp_path):
    with pytest.raises(SolverError, match=r"Unknown learning rate policy: 'warmup'.*multistep"):
        make_solver(tmp_path, 'base_lr: 0.1\nlr_policy: "warmup"\n')


def test_solver_multistep_logs_and_lr_property_is_pure(tmp_path):
    text = 'base_lr: 0.1\nlr_policy: "multistep"\ngamma: 0.1\nstepvalue: 2\nstepvalue: 3\n'
    solver = make_solver(tmp_path, text)
    with recorded_log() as log:
        solver.step(4)
    assert "MultiStep Status: Iteration 2, step = 1" in log
    assert "MultiStep Status: Iteration 3, step = 2" in log
    assert solver.current_step == 2
    assert solver.lr == pytest.approx(0.001)
    assert solver.current_step == 2
    # Reading solver.lr at an iteration where a step is due does not advance it.
    solver.current_step = 1
    assert solver.lr == pytest.approx(0.001)
    assert solver.current_step == 1
    assert solver.get_learning_rate() == pytest.approx(0.001)
    assert solver.current_step == 2


def test_step_policy_without_stepsize_fails_at_solver_construction(tmp_path):
    with pytest.raises(SolverError, match="lr_policy 'step' needs stepsize > 0"):
        make_solver(tmp_path, 'base_lr: 0.1\nlr_policy: "step"\ngamma: 0.1\n')
