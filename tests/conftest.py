import os
import sys

import pytest

# Tests import helpers as `tests.caffe.layer_harness`.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Keep the engine's INFO logs out of test output unless asked for.
os.environ.setdefault("GLOG_minloglevel", "1")

import torch

# Test tensors are tiny: one thread avoids oversubscribing the cores (several times
# faster on 2 shared cores); subprocesses started by tests choose their own.
torch.set_num_threads(1)
# float32 means float32 on CUDA too, as caffe.set_mode_gpu() makes it for the engine: the
# CUDA parity tests build layers on the device directly and compare at float32 tolerance.
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False


@pytest.fixture(scope="session", autouse=True)
def _glog_files_in_a_temp_dir(tmp_path_factory):
    """The `caffe` command writes glog's log files (caffe/tools/log_files.py), by default to /tmp.
    Point GLOG_log_dir at pytest's temp directory instead, for the in-process CLI runs and,
    through the environment they copy, for the subprocesses tests start. A GLOG_log_dir
    set by whoever runs the tests wins."""
    with pytest.MonkeyPatch.context() as patch:
        if not os.environ.get("GLOG_log_dir"):
            patch.setenv("GLOG_log_dir", str(tmp_path_factory.mktemp("glog")))
        yield


@pytest.fixture(autouse=True)
def _seed_and_cpu():
    import caffe

    caffe.set_mode_cpu()
    caffe.set_random_seed(1701)
    yield


@pytest.fixture(scope="session")
def zoo_data_root(tmp_path_factory):
    """A directory holding every LMDB and mean file the zoo's train_val nets name (two
    stand-in records each: tests/models/zoo.py)."""
    from tests.models.zoo import ZOO, read_net, write_stand_in_data

    root = tmp_path_factory.mktemp("zoo_data")
    for model in ZOO:
        write_stand_in_data(root, model, read_net(model.name))
    return root


def pytest_collection_modifyitems(config, items):
    """Every test that skips without CUDA is a `cuda` test, so that `pytest -m cuda` (the GPU
    session's bench/gpu_session.sh) runs all of them, however each file spells its skip."""
    for item in items:
        for mark in item.iter_markers("skipif"):
            if "CUDA" in str(mark.kwargs.get("reason", "")):
                item.add_marker(pytest.mark.cuda)
                break
