"""`caffe time` runs every model's DummyData variant on the CPU."""

import re

import pytest

from tests.caffe.tools.cli_helpers import messages, run_caffe
from tests.models.zoo import MODEL_NAMES, model_file, read_net, require_registered


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_caffe_time_runs_the_dummy_variant(name):
    net = read_net(name, "train_val_dummy.prototxt")
    require_registered(net)
    path = model_file(name, "train_val_dummy.prototxt")
    status, log = run_caffe("time", "--model", str(path), "--iterations", "1")
    assert status == 0, log
    lines = messages(log)
    initial = next(line for line in lines if line.startswith("Initial loss: "))
    assert float(initial.split()[2]) > 0  # a real softmax loss over random inputs
    timed = [line.split("\t")[0].strip() for line in lines if "\tforward: " in line]
    trained = [
        layer.name for layer in net.layer if not any(rule.phase == 1 for rule in layer.include)
    ]
    # Every TRAIN layer is timed (plus the automatic Split layers).
    assert [name for name in timed if not name.endswith("_split")] == trained
    assert any(re.fullmatch(r"Average Forward-Backward: [\d.e+-]+ ms\.", line) for line in lines)
