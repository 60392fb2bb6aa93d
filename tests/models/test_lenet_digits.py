"""The digits LeNet as documented (convert_digits, copy, cd, caffe train): it reaches 97%
test accuracy, logs in Caffe's format and snapshots; a run stopped at its iteration-200
snapshot and resumed with --snapshot ends with the uninterrupted run's weights."""

import shutil

import numpy as np

from caffe.formats.weights_io import read_caffemodel
from caffe.tools.convert_digits import convert_digits
from caffe.tools.parse_log import parse_log
from tests.caffe.tools.cli_helpers import run_caffe
from tests.models.zoo import model_file, read_net, require_registered


def weights(path):
    return {
        (layer.name, i): blob.data
        for layer in read_caffemodel(str(path)).layers
        for i, blob in enumerate(layer.blobs)
    }


def test_digits_training_reaches_97_percent_and_resumes_exactly(tmp_path, monkeypatch):
    require_registered(read_net("lenet", "lenet_digits_train_test.prototxt"))
    assert convert_digits(str(tmp_path)) == (1437, 360)
    for file in ("lenet_digits_solver.prototxt", "lenet_digits_train_test.prototxt"):
        shutil.copy(model_file("lenet", file), tmp_path / file)
    solver = (tmp_path / "lenet_digits_solver.prototxt").read_text()
    assert "snapshot: 0" in solver
    (tmp_path / "lenet_digits_solver.prototxt").write_text(
        solver.replace("snapshot: 0", "snapshot: 200")
    )
    monkeypatch.chdir(tmp_path)
    status, log = run_caffe("train", "--solver", "lenet_digits_solver.prototxt")
    assert status == 0, log
    assert "Snapshotting to binary proto file lenet_digits_iter_200.caffemodel" in log
    (tmp_path / "train.log").write_text(log)
    train_rows, test_rows = parse_log(str(tmp_path / "train.log"))
    assert [row["NumIters"] for row in test_rows] == [0, 100, 200, 300, 400]
    assert test_rows[-1]["accuracy"] >= 0.97
    assert train_rows and train_rows[-1]["loss"] < 0.2
    uninterrupted = weights(tmp_path / "lenet_digits_iter_400.caffemodel")

    # Resume from the iteration-200 snapshot into other files; same final weights.
    for suffix in ("caffemodel", "solverstate"):
        shutil.move(tmp_path / f"lenet_digits_iter_400.{suffix}", tmp_path / f"full.{suffix}")
    status, log = run_caffe("train", "--solver", "lenet_digits_solver.prototxt",
                            "--snapshot", "lenet_digits_iter_200.solverstate")  # fmt: skip
    assert status == 0, log
    assert "Restoring previous solver status from lenet_digits_iter_200.solverstate" in log
    resumed = weights(tmp_path / "lenet_digits_iter_400.caffemodel")
    assert resumed.keys() == uninterrupted.keys()
    for key, value in uninterrupted.items():
        np.testing.assert_allclose(resumed[key], value, rtol=1e-5, atol=1e-7, err_msg=str(key))
