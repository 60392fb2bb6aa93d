"""The digits LeNet with base_lr 1e6 (issue 10, item 6): the loss is nan from iteration 2.
`caffe train` warns at once, stops after --nonfinite_limit (10) such iterations with one
fatal line and exit status 1, and never writes a NaN snapshot; --nonfinite_limit 0 trains
on as BVLC Caffe does, still refusing the NaN snapshots and naming the finite one kept."""

import shutil

import numpy as np
import pytest

from caffe.formats.weights_io import read_caffemodel
from caffe.tools.convert_digits import convert_digits
from tests.caffe.tools.cli_helpers import messages, run_caffe
from tests.models.zoo import model_file, read_net, require_registered


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    require_registered(read_net("lenet", "lenet_digits_train_test.prototxt"))
    directory = tmp_path_factory.mktemp("digits")
    pytest.importorskip("sklearn")
    convert_digits(str(directory))
    return directory


@pytest.fixture
def diverging_run(digits, tmp_path, monkeypatch):
    """A copy of the digits solver with base_lr 1e6, a snapshot every iteration, no tests."""
    for name in ("digits_train_lmdb", "digits_test_lmdb"):
        (tmp_path / name).symlink_to(digits / name)
    shutil.copy(model_file("lenet", "lenet_digits_train_test.prototxt"), tmp_path)
    solver = model_file("lenet", "lenet_digits_solver.prototxt").read_text()
    changes = {
        "base_lr: 0.01": "base_lr: 1e6",
        "snapshot: 0": "snapshot: 1",
        "max_iter: 400": "max_iter: 30",
        "test_interval: 100": "test_interval: 1000",
        "solver_mode: GPU": "solver_mode: CPU",
    }
    for old, new in changes.items():
        assert old in solver
        solver = solver.replace(old, new)
    (tmp_path / "solver.prototxt").write_text(solver)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def snapshots(directory):
    return sorted(p.name for p in directory.glob("lenet_digits_iter_*"))


def assert_finite(path):
    for layer in read_caffemodel(str(path)).layers:
        for blob in layer.blobs:
            assert np.isfinite(blob.data).all(), layer.name


def test_divergence_stops_the_run_with_one_line_and_exit_1(diverging_run):
    status, log = run_caffe("train", "--solver", "solver.prototxt")
    assert status == 1
    lines = messages(log)
    warning = (
        "Iteration 2: loss = nan in output 'loss' (training stops after 10 consecutive "
        "non-finite iterations)"
    )
    assert warning in lines
    assert lines[-1].startswith(
        "Iteration 11: training diverged: the loss or gradient has been non-finite for 10 "
        "consecutive iterations (since iteration 2: loss = nan in output 'loss')."
    )
    assert log.splitlines()[-1].startswith("F")  # the fatal line, no traceback
    assert snapshots(diverging_run) == [
        f"lenet_digits_iter_{i}.{ext}" for i in (1, 2) for ext in ("caffemodel", "solverstate")
    ]
    assert_finite(diverging_run / "lenet_digits_iter_2.caffemodel")


def test_nonfinite_limit_0_trains_on_and_keeps_the_last_finite_snapshot(diverging_run):
    status, log = run_caffe("train", "--solver", "solver.prototxt", "--nonfinite_limit", "0")
    assert status == 0
    lines = messages(log)
    assert "Optimization Done." in lines
    refusals = [m for m in lines if "not snapshotting" in m]
    assert len(refusals) == 28  # iterations 3..30, the final one (30) included
    assert refusals[-1].startswith("Iteration 30: not snapshotting: the weights of all 8 ")
    assert refusals[-1].endswith("the last snapshot, lenet_digits_iter_2.solverstate, is kept")
    assert snapshots(diverging_run)[-2:] == [
        "lenet_digits_iter_2.caffemodel", "lenet_digits_iter_2.solverstate"
    ]  # fmt: skip
    assert_finite(diverging_run / "lenet_digits_iter_2.caffemodel")
