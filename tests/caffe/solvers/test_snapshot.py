"""Snapshots and restore (docs/caffe_format.md §4.5, §10 item 9): file names, bytes, round
trips, resuming."""

import os
import shutil

import h5py
import numpy as np
import pytest

from caffe.errors import SolverError, WeightsError
from caffe.proto import caffe_pb2
from tests.caffe.solver_harness import make_solver, net_text, recorded_log, weights

MOMENTUM = "base_lr: 0.1\nmomentum: 0.9\nweight_decay: 0.01\n"
MULTISTEP = "lr_policy: 'multistep'\ngamma: 0.5\nstepvalue: 2\nstepvalue: 4\n"


def solver_for(directory, extra="", type_name=None, net=None):
    text = MOMENTUM + MULTISTEP + f"snapshot_prefix: '{directory}/snap'\nmax_iter: 6\n" + extra
    return make_solver(directory, text, net, type_name)


def history(solver):
    return [h.numpy().copy() for h in solver.history]


def assert_same_state(a, b):
    assert (a.iter, a.current_step) == (b.iter, b.current_step)
    for x, y in zip(weights(a.net) + history(a), weights(b.net) + history(b)):
        np.testing.assert_array_equal(x, y)


def test_binary_snapshot_bytes_and_round_trip(tmp_path):
    solver = solver_for(tmp_path, "snapshot: 3\nsnapshot_after_train: false\n")
    with recorded_log() as log:
        solver.step(3)
    model, state = tmp_path / "snap_iter_3.caffemodel", tmp_path / "snap_iter_3.solverstate"
    assert log[-2:] == [
        f"Snapshotting to binary proto file {model}",
        f"Snapshotting solver state to binary proto file {state}",
    ]
    # Bytes equal protobuf's own serialization of the same messages.
    assert model.read_bytes() == solver.net.to_proto().SerializeToString()
    reference = caffe_pb2.SolverState(iter=3, learned_net=str(model), current_step=1)
    for h in solver.history:
        reference.history.add(data=h.numpy().reshape(-1).tolist()).shape.dim.extend(h.shape)
    assert state.read_bytes() == reference.SerializeToString()
    # A fresh solver restored from them holds the same weights and history, and its own
    # snapshot of that state reproduces both files bit for bit.
    model_bytes, state_bytes = model.read_bytes(), state.read_bytes()
    fresh = solver_for(tmp_path / "fresh")
    with recorded_log() as log:
        fresh.restore(str(state))
    assert log[0] == f"Restoring previous solver status from {state}"
    assert_same_state(fresh, solver)
    fresh.param.snapshot_prefix = str(tmp_path / "snap")
    fresh.snapshot()
    assert model.read_bytes() == model_bytes and state.read_bytes() == state_bytes


def test_hdf5_snapshot_round_trip(tmp_path):
    solver = solver_for(tmp_path, "snapshot_format: HDF5\n", type_name="Adam")
    solver.step(3)
    with recorded_log() as log:
        solver.snapshot()
    model, state = tmp_path / "snap_iter_3.caffemodel.h5", tmp_path / "snap_iter_3.solverstate.h5"
    assert log == [
        f"Snapshotting to HDF5 file {model}",
        f"Snapshotting solver state to HDF5 file {state}",
    ]
    with h5py.File(state, "r") as f:
        assert list(f["iter"]) == [3] and list(f["current_step"]) == [1]
        assert f["learned_net"][()].decode() == str(model)
        assert sorted(f["history"]) == ["0", "1", "2", "3"]  # Adam: m and v per param
        np.testing.assert_array_equal(f["history"]["3"], solver.history[3].numpy())
    with h5py.File(model, "r") as f:
        np.testing.assert_array_equal(f["data"]["ip"]["0"], weights(solver.net)[0])
    fresh = solver_for(tmp_path / "fresh", type_name="Adam")
    fresh.restore(str(state))
    assert_same_state(fresh, solver)


def test_stopping_at_a_snapshot_and_resuming_equals_an_uninterrupted_run(tmp_path):
    straight = solver_for(tmp_path / "straight", "random_seed: 3\n")
    straight.solve()
    interrupted = solver_for(tmp_path / "first", "random_seed: 3\n")
    interrupted.set_action_function(lambda: "stop" if interrupted.iter == 3 else "none")
    interrupted.solve()  # stops at 3 and snapshots (snapshot_after_train)
    assert interrupted.iter == 3
    resumed = solver_for(tmp_path / "second", "random_seed: 99\n")  # other initial weights
    with recorded_log() as log:
        resumed.solve(str(tmp_path / "first" / "snap_iter_3.solverstate"))
    assert sum("Restoring previous solver status from" in m for m in log) == 1
    # current_step 1 was restored: the next step is due at 4, none is taken again at 3.
    assert [m for m in log if m.startswith("MultiStep")] == [
        "MultiStep Status: Iteration 4, step = 2"
    ]
    assert resumed.iter == 6
    assert_same_state(resumed, straight)


def test_learned_net_is_found_beside_a_moved_state_file(tmp_path):
    solver = solver_for(tmp_path / "run")
    solver.step(2)
    solver.snapshot()
    moved = tmp_path / "moved"
    shutil.copytree(tmp_path / "run", moved)
    shutil.rmtree(tmp_path / "run")
    fresh = solver_for(tmp_path / "fresh")
    fresh.restore(str(moved / "snap_iter_2.solverstate"))
    assert_same_state(fresh, solver)
    os.remove(moved / "snap_iter_2.caffemodel")
    with pytest.raises(WeightsError, match=r"learned_net .*snap_iter_2\.caffemodel"):
        fresh.restore(str(moved / "snap_iter_2.solverstate"))


def test_history_count_mismatch_names_the_file(tmp_path):
    solver = solver_for(tmp_path)
    solver.step(1)
    solver.snapshot()
    adam = solver_for(tmp_path / "adam", type_name="Adam")
    state = str(tmp_path / "snap_iter_1.solverstate")
    before = weights(adam.net)
    with pytest.raises(SolverError, match=f"{state}: Incorrect length of history blobs.*has 2"):
        adam.restore(state)
    assert adam.iter == 0  # nothing changed
    for a, b in zip(before, weights(adam.net)):
        np.testing.assert_array_equal(a, b)


def test_history_shape_mismatch_names_the_file_and_blob(tmp_path):
    solver = solver_for(tmp_path)
    solver.step(1)
    solver.snapshot()
    wider = net_text().replace("dim: 4 dim: 3 }", "dim: 4 dim: 5 }")
    other = solver_for(tmp_path / "wide", net=wider)
    state = str(tmp_path / "snap_iter_1.solverstate")
    with pytest.raises(SolverError, match=r"snap_iter_1.solverstate: history blob 0 has shape "
                                          r"\[2, 3\], the solver expects \[2, 5\]"):  # fmt: skip
        other.restore(state)


def test_snapshot_diff_writes_diffs(tmp_path):
    solver = solver_for(tmp_path, "snapshot_diff: true\n")
    solver.step(1)
    solver.snapshot()
    model = caffe_pb2.NetParameter.FromString((tmp_path / "snap_iter_1.caffemodel").read_bytes())
    ip = next(layer for layer in model.layer if layer.name == "ip")
    np.testing.assert_array_equal(np.array(ip.blobs[0].diff, np.float32).reshape(2, 3),
                                  solver.net.learnable_params[0].diff)  # fmt: skip
