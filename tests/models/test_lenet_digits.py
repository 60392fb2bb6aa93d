"""The digits demo's files work as documented: convert_digits, copy, cd, caffe train."""

import shutil

from caffe.tools.convert_digits import convert_digits
from caffe.tools.parse_log import parse_log
from tests.caffe.tools.cli_helpers import run_caffe
from tests.models.zoo import model_file, read_net, require_registered


def test_short_digits_training_learns(tmp_path, monkeypatch):
    require_registered(read_net("lenet", "lenet_digits_train_test.prototxt"))
    assert convert_digits(str(tmp_path)) == (1437, 360)
    for file in ("lenet_digits_solver.prototxt", "lenet_digits_train_test.prototxt"):
        shutil.copy(model_file("lenet", file), tmp_path / file)
    # The demo's solver, cut to 100 iterations with one test at the end, to stay quick.
    solver = (tmp_path / "lenet_digits_solver.prototxt").read_text()
    solver = solver.replace("max_iter: 400", "max_iter: 100")
    solver = solver.replace("test_interval: 100", "test_interval: 100")
    solver += "test_initialization: false\n"
    (tmp_path / "lenet_digits_solver.prototxt").write_text(solver)
    monkeypatch.chdir(tmp_path)
    status, log = run_caffe("train", "--solver", "lenet_digits_solver.prototxt")
    assert status == 0, log
    assert (tmp_path / "lenet_digits_iter_100.caffemodel").is_file()
    (tmp_path / "train.log").write_text(log)
    _, test_rows = parse_log(str(tmp_path / "train.log"))
    assert [row["NumIters"] for row in test_rows] == [100]
    assert test_rows[0]["accuracy"] >= 0.9  # the full 400 iterations reach about 0.98
