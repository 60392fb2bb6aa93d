import pytest

from tests.caffe.tools.cli_helpers import require_layers, run_caffe, write_tiny_solver


@pytest.fixture(scope="session")
def trained_tiny(tmp_path_factory):
    """One `caffe train` run of the tiny solver (6 iterations, snapshots at 3 and 6),
    shared by the tests that read its log, snapshots or CSVs: (directory, status, log)."""
    require_layers("DummyData", "InnerProduct", "Accuracy", "SoftmaxWithLoss")
    directory = tmp_path_factory.mktemp("tiny_train")
    solver = write_tiny_solver(directory, max_iter=6, snapshot=3)
    status, log = run_caffe("train", "--solver", str(solver), "--level", "2", "--stage", "deep")
    (directory / "train.log").write_text(log)
    return directory, status, log
