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


@pytest.fixture(autouse=True)
def _seed_and_cpu():
    import caffe

    caffe.set_mode_cpu()
    caffe.set_random_seed(1701)
    yield
