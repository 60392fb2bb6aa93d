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
