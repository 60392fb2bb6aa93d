"""The README's main command: LeNet on the digits with 2 workers and 2 shards prints the
HybComm plan and Caffe's log lines and reaches at least 97% test accuracy."""

from __future__ import annotations

import os
import subprocess
import sys


def test_demo_trains_lenet_to_97_percent(tmp_path):
    env = {**os.environ, "GLOG_minloglevel": "0"}
    result = subprocess.run(
        [sys.executable, "-m", "poseidon.cli", "demo", "--dir", str(tmp_path / "demo")],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "HybComm plan" in output and " SFB" in output
    assert "[worker 0]" in output and "[worker 1]" in output
    assert "Iteration 400, Testing net (#0)" in output
    assert "reached the 97% target" in output
    assert (tmp_path / "demo" / "lenet_digits_iter_400.caffemodel").exists()


def test_prepare_only_writes_the_job_for_another_launcher(tmp_path):
    """`--prepare-only` leaves what a cluster started another way needs (docker/compose.yaml):
    the digits LMDBs, the solver, and the net at batch 64/P1 per worker; it trains nothing."""
    from caffe.formats.proto_io import read_net_param

    directory = tmp_path / "cluster"
    result = subprocess.run(
        [sys.executable, "-m", "poseidon.cli", "demo", "--prepare-only", "-n", "4",
         "--dir", str(directory)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "batch 16 for each of 4 workers" in result.stdout
    assert (directory / "digits_train_lmdb").is_dir() and (directory / "digits_test_lmdb").is_dir()
    assert (directory / "lenet_digits_solver.prototxt").is_file()
    net = read_net_param(str(directory / "lenet_digits_train_test.prototxt"))
    batches = sorted(layer.data_param.batch_size for layer in net.layer if layer.type == "Data")
    assert batches == [16, 120]
    assert not list(directory.glob("*.caffemodel"))
