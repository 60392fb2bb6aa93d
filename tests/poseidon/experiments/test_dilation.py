"""The emulation's time dilation: enough for the links' bytes and for the nodes' host work."""

from __future__ import annotations

import pytest

from poseidon.experiments import run
from poseidon.experiments.profile import load_profile
from poseidon.experiments.resolve import resolve_profile


@pytest.fixture
def two_cores(monkeypatch):
    monkeypatch.setattr(run.os, "cpu_count", lambda: 2)


def shipped(model: str):
    return load_profile(resolve_profile("titanx-maxwell", model))


def test_bytes_alone_set_the_dilation_of_a_net_of_few_layers(two_cores):
    vgg = shipped("vgg19_22k")  # 46 layers, 0.93 s
    assert run.choose_dilation(16, 10e9, 32, vgg) == run.choose_dilation(16, 10e9, 32) == 8
    assert run.choose_dilation(2, 10e9, 32, vgg) == run.MIN_DILATION


def test_many_short_layers_raise_the_dilation_with_the_nodes(two_cores):
    inception = shipped("inception_v3")  # 420 layers, 0.38 s
    dilations = [run.choose_dilation(p, 10e9, 32, inception) for p in (1, 2, 4, 8, 16)]
    assert dilations == [4, 4, 8, 16, 32]
    for p, d in zip((1, 2, 4, 8, 16), dilations):
        host_s = p * len(inception.layers) * run.HOST_S_PER_LAYER
        assert host_s <= run.HOST_CPU_SHARE * 2 * d * inception.iteration_s
        assert d == run.MIN_DILATION or host_s > run.HOST_CPU_SHARE * 2 * (d / 2) * (
            inception.iteration_s
        )


def test_more_cores_need_less_dilation(monkeypatch):
    monkeypatch.setattr(run.os, "cpu_count", lambda: 16)
    assert run.choose_dilation(16, 10e9, 32, shipped("inception_v3")) == 8
