"""`caffe test` and `caffe time`: Caffe's log lines, in Caffe's order, with the right values."""

import re

import numpy as np

from tests.caffe.tools.cli_helpers import TINY_NET, messages, require_layers, run_caffe

NUMBER = r"(-?[\d.]+(?:e[-+]?\d+)?|nan|inf)"


def test_test_scores_every_batch_and_the_means(trained_tiny, tmp_path):
    directory, _, _ = trained_tiny
    model = directory / "tiny_net.prototxt"
    weights = directory / "tiny_iter_6.caffemodel"
    status, log = run_caffe(
        "test", "--model", str(model), "--weights", str(weights), "--iterations", "3"
    )
    assert status == 0, log
    lines = messages(log)
    assert "Use CPU." in lines
    assert "Running for 3 iterations." in lines
    batches = [re.fullmatch(rf"Batch (\d+), (\w+) = {NUMBER}", line) for line in lines]
    batches = [m for m in batches if m]
    # Outputs are sorted by name: accuracy before loss, for each of the 3 batches.
    assert [(int(m.group(1)), m.group(2)) for m in batches] == [
        (i, name) for i in range(3) for name in ("accuracy", "loss")
    ]
    values = {
        name: [float(m.group(3)) for m in batches if m.group(2) == name]
        for name in ("accuracy", "loss")
    }
    loss_line = next(line for line in lines if line.startswith("Loss: "))
    assert np.isclose(float(loss_line.split()[1]), np.mean(values["loss"]), rtol=1e-4)
    mean_accuracy = next(line for line in lines if line.startswith("accuracy = "))
    assert np.isclose(float(mean_accuracy.split()[2]), np.mean(values["accuracy"]), rtol=1e-4)
    mean_loss = next(line for line in lines if line.startswith("loss = "))
    match = re.fullmatch(rf"loss = {NUMBER} \(\* 1 = {NUMBER} loss\)", mean_loss)
    assert match and match.group(1) == match.group(2)

    # Accuracy over a batch of 8 items is a whole number of eighths.
    assert all(float(v * 8).is_integer() and 0 <= v <= 1 for v in values["accuracy"])


def test_time_logs_caffes_benchmark_lines(tmp_path):
    require_layers("DummyData", "InnerProduct", "SoftmaxWithLoss")
    model = tmp_path / "net.prototxt"
    model.write_text(TINY_NET)
    status, log = run_caffe("time", "--model", str(model), "--iterations", "3")
    assert status == 0, log
    lines = messages(log)
    assert lines.index("Performing Forward") < lines.index("*** Benchmark begins ***")
    assert any(re.fullmatch(rf"Initial loss: {NUMBER}", line) for line in lines)
    begin, end = lines.index("*** Benchmark begins ***"), lines.index("*** Benchmark ends ***")
    body = lines[begin + 1 : end]
    assert body[0] == "Testing for 3 iterations."
    iterations = [
        re.fullmatch(rf"Iteration: (\d) forward-backward time: {NUMBER} ms\.", line)
        for line in body
    ]
    assert [int(m.group(1)) for m in iterations if m] == [1, 2, 3]
    # TRAIN phase by default: the TEST-only Accuracy layer is not timed.
    per_layer = [line for line in body if "\tforward: " in line or "\tbackward: " in line]
    names = [line.split("\t")[0] for line in per_layer]
    assert names == [f"{name:>10}" for name in ("data", "ip", "loss") for _ in range(2)]
    for key in (
        "Average Forward pass",
        "Average Backward pass",
        "Average Forward-Backward",
        "Total Time",
    ):
        assert any(re.fullmatch(rf"{key}: {NUMBER} ms\.", line) for line in body), key


def test_time_honours_phase_level_and_stage(tmp_path):
    require_layers("DummyData", "InnerProduct", "SoftmaxWithLoss", "Accuracy", "ReLU")
    model = tmp_path / "net.prototxt"
    model.write_text(
        TINY_NET.replace(
            'layer { name: "loss"',
            'layer { name: "staged" type: "ReLU" bottom: "ip" top: "ip"\n'
            '  include { stage: "extra" min_level: 1 } }\nlayer { name: "loss"',
        )
    )

    def timed_layers(*flags: str) -> list[str]:
        status, log = run_caffe("time", "--model", str(model), "--iterations", "1", *flags)
        assert status == 0, log
        return [line.split("\t")[0].strip() for line in messages(log) if "\tforward:" in line]

    assert timed_layers() == ["data", "ip", "loss"]
    # In TEST, "label" and "ip" feed both Accuracy and the loss, through automatic Splits.
    assert timed_layers("--phase", "TEST") == [
        "data",
        "label_data_1_split",
        "ip",
        "ip_ip_0_split",
        "accuracy",
        "loss",
    ]
    assert timed_layers("--stage", "extra") == ["data", "ip", "loss"]  # level 0 < min_level
    assert timed_layers("--stage", "extra", "--level", "1") == ["data", "ip", "staged", "loss"]
