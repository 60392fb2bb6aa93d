"""`poseidon profile --rates`: the device rates of the time-based cost model, measured and
printed as settings a job's environment takes (parsed back by the settings' own parser)."""

from __future__ import annotations

import math

import pytest

from poseidon.cli import main
from poseidon.config import Config
from poseidon.experiments.rates import measure_rates


def test_measured_rates_are_positive_and_finite():
    rates = measure_rates("cpu", rank=2, sizes=(64, 128), repeats=2)
    assert rates.device == "cpu"
    for value in (rates.gemm_flops_per_s, rates.memory_bytes_per_s):
        assert math.isfinite(value) and value > 1e6  # any machine beats 1 MFLOP/s, 1 MB/s
    with pytest.raises(ValueError, match="want >= 1"):
        measure_rates("cpu", rank=0)


def test_the_command_prints_settings_a_job_takes(capsys):
    assert main(["profile", "--rates", "--threads", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("cpu: PowerSGD rank-4 products at ")
    env = dict(line.split("=", 1) for line in lines[1:])
    config = Config.from_env(env)
    assert config.gemm_rate > 0 and config.memory_rate > 0
    assert config.rates().gemm_flops_per_s == config.gemm_rate
    assert main(["profile", "--rates", "--model", "lenet"]) == 2
    assert "--rates measures the device alone" in capsys.readouterr().err
