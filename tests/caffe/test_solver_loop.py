"""The training loop's mechanics (docs/caffe_format.md §4.2): iter_size, clipping,
regularization, loss smoothing, callbacks, actions, and the update/flush hooks distributed
training uses."""

import numpy as np
import pytest

from caffe.errors import SolverError
from tests.caffe.solver_harness import (
    B0,
    W0,
    X,
    Y,
    make_solver_at_w0,
    net_text,
    recorded_log,
    softmax_gradients,
    weights,
)

SGD = "base_lr: 0.1\nmomentum: 0.9\nweight_decay: 0.01\nlr_policy: 'fixed'\n"


def solver_at(tmp_path, text=SGD, net=None, name="s"):
    return make_solver_at_w0(tmp_path / name, text, net)


def test_iter_size_two_equals_one_step_on_the_doubled_batch(tmp_path):
    halves = [(X[:2], Y[:2]), (X[2:], Y[2:])]
    accumulating = solver_at(tmp_path, SGD + "iter_size: 2\n", net_text(batch=2), "half")
    fed = []

    def feed_next_half(layer_index):
        if layer_index == 0:
            x, y = halves[len(fed) % 2]
            accumulating.net.blobs["data"].data[...] = x
            accumulating.net.blobs["label"].data[...] = y
            fed.append(layer_index)

    accumulating.net.before_forward(feed_next_half)
    whole = solver_at(tmp_path, SGD, name="whole")
    accumulating.step(3)
    whole.step(3)
    assert len(fed) == 6
    for a, b in zip(weights(accumulating.net), weights(whole.net)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert accumulating.iter == whole.iter == 3


def test_clip_gradients_scales_by_the_global_norm_and_logs(tmp_path):
    solver = solver_at(tmp_path, "base_lr: 1\nlr_policy: 'fixed'\nclip_gradients: 2\n")
    w, b = solver.net.learnable_params
    w.diff[...] = 3.0
    b.diff[...] = -4.0
    norm = np.sqrt(6 * 9 + 2 * 16)
    with recorded_log() as log:
        solver.clip_gradients()
    np.testing.assert_allclose(w.diff, 3.0 * 2 / norm, rtol=1e-6)
    np.testing.assert_allclose(b.diff, -4.0 * 2 / norm, rtol=1e-6)
    # 6 significant digits, C++ ostream style.
    assert log == [
        "Gradient clipping: scaling down gradients (L2 norm 9.27362 > 2) by scale factor 0.215666"
    ]
    # Under the threshold nothing changes.
    w.diff[...] = 0.1
    b.diff[...] = 0.1
    with recorded_log() as log:
        solver.clip_gradients()
    assert log == [] and np.all(w.diff == np.float32(0.1))


def test_clipping_happens_inside_apply_update_before_the_rule(tmp_path):
    solver = solver_at(tmp_path, "base_lr: 1\nlr_policy: 'fixed'\nclip_gradients: 1\n")
    grads = [np.full(W0.shape, 3.0), np.full(B0.shape, -4.0)]
    for blob, g in zip(solver.net.learnable_params, grads):
        blob.diff[...] = g
    solver.apply_update()
    scale = 1 / np.sqrt(6 * 9 + 2 * 16)
    np.testing.assert_allclose(weights(solver.net)[0], W0 - 3.0 * scale, rtol=1e-6)
    np.testing.assert_allclose(weights(solver.net)[1], B0 + 2 * 4.0 * scale, rtol=1e-6)  # lr_mult 2


@pytest.mark.parametrize("kind", ["L2", "L1"])
def test_regularization_uses_decay_mult(tmp_path, kind):
    specs = "param { lr_mult: 1 decay_mult: 2 } param { lr_mult: 1 decay_mult: 0.5 }"
    text = f"base_lr: 1\nlr_policy: 'fixed'\nweight_decay: 0.1\nregularization_type: '{kind}'\n"
    solver = solver_at(tmp_path, text, net_text(param_specs=specs))
    solver.net.clear_param_diffs()
    solver.apply_update()
    shape = (lambda v: v) if kind == "L2" else np.sign
    np.testing.assert_allclose(weights(solver.net)[0], W0 - 0.1 * 2 * shape(W0), rtol=1e-6)
    np.testing.assert_allclose(weights(solver.net)[1], B0 - 0.1 * 0.5 * shape(B0), rtol=1e-6)


def test_unknown_regularization_type_fails_when_it_is_used(tmp_path):
    solver = solver_at(tmp_path, "base_lr: 1\nlr_policy: 'fixed'\nregularization_type: 'L3'\n")
    solver.param.weight_decay = 0.1
    with pytest.raises(SolverError, match="Unknown regularization type: 'L3'"):
        solver.update_param(0, 1.0)


def test_smoothed_loss_is_the_mean_of_the_last_average_loss_losses(tmp_path):
    solver = solver_at(tmp_path, SGD + "average_loss: 3\n")
    losses, checked = [], []

    def on_gradients_ready():
        losses.append(float(solver.net.blobs["loss"].data))
        checked.append(solver.smoothed_loss == pytest.approx(np.mean(losses[-3:]), rel=1e-6))

    solver.add_callback(lambda: None, on_gradients_ready)
    solver.step(6)
    assert len(set(np.round(losses, 6))) == 6  # the loss moves every iteration
    assert checked == [True] * 6


def test_callbacks_in_both_forms_run_at_the_spec_points(tmp_path):
    solver = solver_at(tmp_path)
    events = []

    def diff_norm():
        return float(np.abs(solver.net.learnable_params[0].diff).sum())

    class Recorder:
        def on_start(self):
            events.append(("obj start", solver.iter, diff_norm() == 0))

        def on_gradients_ready(self):
            events.append(("obj ready", solver.iter, diff_norm() > 0))

    solver.add_callback(
        lambda: events.append(("fn start", solver.iter, diff_norm() == 0)),
        lambda: events.append(("fn ready", solver.iter, diff_norm() > 0)),
    )
    solver.add_callback(Recorder())
    solver.step(2)
    assert events == [
        (kind, it, True)
        for it in range(2)
        for kind in ("fn start", "obj start", "fn ready", "obj ready")
    ]
    with pytest.raises(TypeError, match="on_start"):
        solver.add_callback(object())


def test_update_hook_replaces_the_per_param_update_and_net_update(tmp_path):
    text = SGD + "clip_gradients: 0.05\n"
    plain, hooked = solver_at(tmp_path, text, name="a"), solver_at(tmp_path, text, name="b")
    seen = []

    def deferred_update(rate):
        norm = float(np.sqrt(sum((b.diff.astype(np.float64) ** 2).sum()
                                 for b in hooked.net.learnable_params)))  # fmt: skip
        seen.append((rate, hooked.iter, norm))
        for param_id in range(len(hooked.net.learnable_params)):
            hooked.update_param(param_id, rate)
        hooked.net.update()

    hooked.update_hook = deferred_update
    plain.step(3)
    hooked.step(3)
    assert [(r, i) for r, i, _ in seen] == [(pytest.approx(0.1), i) for i in range(3)]
    assert all(norm <= 0.05 * (1 + 1e-5) for _, _, norm in seen)  # clipped before the hook
    for a, b in zip(weights(plain.net), weights(hooked.net)):
        np.testing.assert_array_equal(a, b)
    # A hook that updates nothing leaves the weights alone; iter still counts.
    hooked.update_hook = None  # a single slot: detach before attaching another
    hooked.update_hook = lambda rate: None
    before = weights(hooked.net)
    hooked.step(2)
    assert hooked.iter == 5
    for a, b in zip(before, weights(hooked.net)):
        np.testing.assert_array_equal(a, b)


def test_flush_hook_runs_before_tests_and_snapshots_and_at_the_end(tmp_path):
    text = SGD + f"test_iter: 1\ntest_interval: 2\nsnapshot: 2\nsnapshot_prefix: '{tmp_path}/f'\n"
    solver = solver_at(tmp_path, text)
    with recorded_log() as log:
        solver.flush_hook = lambda: log.append("FLUSH")
        solver.step(4)
    events = [m for m in log if m == "FLUSH" or "Testing net" in m or "Snapshotting to" in m]
    assert events == [
        "FLUSH", "Iteration 0, Testing net (#0)",
        "FLUSH", f"Snapshotting to binary proto file {tmp_path}/f_iter_2.caffemodel",
        "FLUSH", "Iteration 2, Testing net (#0)",
        "FLUSH", f"Snapshotting to binary proto file {tmp_path}/f_iter_4.caffemodel",
        "FLUSH",
    ]  # fmt: skip


def test_stop_action_ends_solve_early_with_a_snapshot(tmp_path):
    text = SGD + f"max_iter: 10\nsnapshot_prefix: '{tmp_path}/stop'\n"
    solver = solver_at(tmp_path, text)
    solver.set_action_function(lambda: "stop" if solver.iter == 2 else "none")
    with recorded_log() as log:
        solver.solve()
    assert solver.iter == 2
    assert "Optimization stopped early." in log and "Optimization Done." not in log
    assert (tmp_path / "stop_iter_2.caffemodel").exists()
    assert (tmp_path / "stop_iter_2.solverstate").exists()


def test_snapshot_action_writes_a_snapshot_now(tmp_path):
    solver = solver_at(tmp_path, SGD + f"snapshot_prefix: '{tmp_path}/req'\n")
    solver.set_action_function(lambda: "snapshot" if solver.iter == 1 else "none")
    solver.step(3)
    assert solver.iter == 3
    assert sorted(p.name for p in tmp_path.glob("req_*")) == [
        "req_iter_1.caffemodel", "req_iter_1.solverstate"
    ]  # fmt: skip


def test_stop_during_testing_interrupts_the_test_and_training(tmp_path):
    solver = solver_at(tmp_path, SGD + "test_iter: 5\ntest_interval: 1\n")
    solver.set_action_function(lambda: "stop")
    with recorded_log() as log:
        solver.step(3)
    assert "Test interrupted." in log
    assert solver.iter == 0 and solver.requested_early_exit
    solver.set_action_function(lambda: "pause")
    with pytest.raises(SolverError, match="'pause'"):
        solver.step(1)


def test_first_step_matches_numpy_forward_backward(tmp_path):
    # The loss the loop reports is the net's forward loss at the pre-update weights.
    solver = solver_at(tmp_path, SGD + "display: 1\n")
    with recorded_log() as log:
        solver.step(1)
    loss, _, _ = softmax_gradients(W0, B0)
    (line,) = [m for m in log if m.startswith("Iteration 0 (")]
    assert float(line.rsplit("= ", 1)[1]) == pytest.approx(loss, rel=1e-5)
