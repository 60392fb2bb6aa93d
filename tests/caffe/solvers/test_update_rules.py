"""Every solver type's update equals the docs/caffe_format.md §4.4 formulas re-derived in
numpy: with diffs set by hand (apply_update alone) and over full step() runs of the tiny net."""

import numpy as np
import pytest
import torch

from tests.caffe.solver_harness import (
    B0,
    W0,
    ReferenceSolver,
    make_solver_at_w0,
    softmax_gradients,
    weights,
)

# Hyper-parameters per type, chosen so every term of each rule matters.
HYPER = {
    "SGD": {"base_lr": 0.1, "momentum": 0.9, "weight_decay": 0.01},
    "Nesterov": {"base_lr": 0.1, "momentum": 0.9, "weight_decay": 0.01},
    "AdaGrad": {"base_lr": 0.1, "delta": 1e-6, "weight_decay": 0.01},
    "RMSProp": {"base_lr": 0.01, "rms_decay": 0.9, "delta": 1e-6, "weight_decay": 0.01},
    "AdaDelta": {"base_lr": 1.0, "momentum": 0.95, "delta": 1e-6, "weight_decay": 0.01},
    "Adam": {"base_lr": 0.01, "momentum": 0.9, "momentum2": 0.999, "delta": 1e-8},
}
LR_MULTS, DECAY_MULTS = [1.0, 2.0], [1.0, 0.0]  # the harness net's param specs


def solver_text(hyper: dict) -> str:
    fields = "\n".join(f"{k}: {v}" for k, v in hyper.items())
    return f'{fields}\nlr_policy: "fixed"\nmax_iter: 100\nsnapshot_after_train: false\n'


def build(tmp_path, kind):
    solver = make_solver_at_w0(tmp_path, solver_text(HYPER[kind]), type_name=kind)
    reference = ReferenceSolver(kind, HYPER[kind], LR_MULTS, DECAY_MULTS, num_params=2)
    return solver, reference


def assert_close(actual, expected):
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize("kind", list(HYPER))
@pytest.mark.parametrize("steps", [1, 3])
def test_apply_update_with_hand_set_diffs(tmp_path, kind, steps):
    solver, reference = build(tmp_path, kind)
    assert type(solver).__name__ == f"{kind}Solver"
    rng = np.random.default_rng(7)
    expected = [W0, B0]
    for _ in range(steps):
        grads = [rng.standard_normal(W0.shape), rng.standard_normal(B0.shape)]
        for blob, g in zip(solver.net.learnable_params, grads):
            blob.diff[...] = g
        solver.apply_update()
        expected = reference.step(grads, expected, HYPER[kind]["base_lr"])
        assert_close(weights(solver.net), expected)
    assert solver.iter == steps
    assert len(solver.history) == len(reference.history_arrays())
    assert_close([h.numpy() for h in solver.history], reference.history_arrays())


@pytest.mark.parametrize("kind", list(HYPER))
def test_step_runs_match_numpy_training(tmp_path, kind):
    solver, reference = build(tmp_path, kind)
    solver.step(3)
    expected = [W0, B0]
    for _ in range(3):
        _, dw, db = softmax_gradients(*expected)
        expected = reference.step([dw, db], expected, HYPER[kind]["base_lr"])
    assert solver.iter == 3
    assert_close(weights(solver.net), expected)
    assert_close([h.numpy() for h in solver.history], reference.history_arrays())


def test_sgd_momentum_by_hand(tmp_path):
    # w = 0.3, g = 0.5, lr 0.1, momentum 0.9, weight decay 0 (decay_mult applies to W only):
    # h1 = 0.05, w1 = 0.25; h2 = 0.9·0.05 + 0.05 = 0.095, w2 = 0.155.
    solver = make_solver_at_w0(tmp_path, "base_lr: 0.1\nmomentum: 0.9\nlr_policy: 'fixed'\n", None)
    w = solver.net.learnable_params[0]
    for expected in (0.25, 0.155):
        w.diff[...] = 0.5
        solver.net.learnable_params[1].diff[...] = 0
        solver.apply_update()
        assert w.data[0, 0] == pytest.approx(expected, abs=1e-7)


def test_adam_first_step_is_lr_times_sign(tmp_path):
    # t = 1: m = 0.1·g, v = 0.001·g², correction = sqrt(0.001)/0.1, so with delta ≈ 0
    # step = lr · sqrt(0.001)/0.1 · 0.1·g/(sqrt(0.001)·|g|) = lr·sign(g).
    text = "base_lr: 0.001\nmomentum: 0.9\nmomentum2: 0.999\ndelta: 1e-12\nlr_policy: 'fixed'\n"
    solver = make_solver_at_w0(tmp_path, text, type_name="Adam")
    grads = [np.where(W0 > 0, 3.0, -0.2), np.array([0.5, -7.0])]
    for blob, g in zip(solver.net.learnable_params, grads):
        blob.diff[...] = g
    solver.apply_update()
    np.testing.assert_allclose(solver.net.learnable_params[0].data, W0 - 0.001 * np.sign(grads[0]),
                               rtol=1e-6)  # fmt: skip
    # Bias lr_mult is 2.
    np.testing.assert_allclose(solver.net.learnable_params[1].data, B0 - 0.002 * np.sign(grads[1]),
                               rtol=1e-6)  # fmt: skip


def test_history_lives_on_the_net_device_with_param_shapes(tmp_path):
    solver, _ = build(tmp_path, "AdaDelta")
    params = solver.net.learnable_params
    assert [tuple(h.shape) for h in solver.history] == [tuple(p.shape) for p in params] * 2
    assert all(h.device == solver.net.device and h.dtype == torch.float32 for h in solver.history)
