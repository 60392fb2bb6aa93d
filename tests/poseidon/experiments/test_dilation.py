"""The emulation's time dilation: enough for the links' bytes and for the nodes' host work."""

from __future__ import annotations

import json
from pathlib import Path

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


def test_single_packets_cost_the_links_four_times_the_cpu(two_cores):
    """Without GSO every byte through the links costs 3-5 times its CPU with super-packets
    (run.py, Note [link CPU]): VGG19-22K's 8 nodes of 10 GbE, which ran at d = 4 on 0.80 of
    the cores without GSO, need d = 16; links below a quarter of the budget keep theirs."""
    vgg = shipped("vgg19_22k")
    assert run.choose_dilation(8, 10e9, 32, vgg) == run.MIN_DILATION
    assert run.choose_dilation(8, 10e9, 32, vgg, gso=False) == 16
    traffic = 8 * 10e9 / 8 / 32  # bytes per wall second at d = 1
    assert traffic / 8 > run.EMULATION_BUDGET_BYTES_PER_S / run.SINGLE_PACKET_CPU_FACTOR
    assert traffic / 16 <= run.EMULATION_BUDGET_BYTES_PER_S / run.SINGLE_PACKET_CPU_FACTOR
    assert run.choose_dilation(2, 200e6, 1, gso=False) == run.choose_dilation(2, 200e6, 1)


def test_the_byte_scale_grows_before_the_dilation_without_gso(two_cores):
    """Shrinking bytes costs no time, dilating does: the links' higher CPU per byte without
    GSO is met first by a higher byte scale (up to PREFERRED_BYTE_SCALE)."""
    inception = shipped("inception_v3")  # 95 MB: 4 brings it under SCALED_MODEL_BYTES
    assert run.choose_byte_scale(inception, [4], 1e9) == 4
    assert run.choose_byte_scale(inception, [4], 10e9) == 8
    assert run.choose_byte_scale(inception, [4], 10e9, gso=False) == run.PREFERRED_BYTE_SCALE
    assert run.choose_byte_scale(inception, [8], 10e9, gso=False) == run.PREFERRED_BYTE_SCALE


def test_bytes_keep_their_size_where_the_host_load_sets_the_dilation(two_cores):
    """Every emulated packet carries the byte scale times a real one's data, so bytes are
    shrunk only as far as the links need at the dilation the cells get anyway: Inception-V3
    on 4 x 4 needs d = 256 for its 16 workers' host load at any byte scale, where its links
    fit at byte scale 4 (its flat Poseidon cell read 0.512 s at 32 and 0.497 s at 4,
    docs/experiments.md §6.5)."""
    inception = shipped("inception_v3")
    scale = run.choose_byte_scale(inception, [4], 10e9, per_node=4, gso=False)
    assert scale == 4
    assert run.choose_dilation(4, 10e9, 4, inception, 4, gso=False) == 256
    assert run.choose_dilation(4, 10e9, 32, inception, 4, gso=False) == 256
    # Over a sweep every node count keeps the dilation the preferred scale would give it.
    nodes = [1, 2, 4, 8, 16]
    assert run.choose_byte_scale(inception, nodes, 10e9) == 8
    for p in nodes:
        assert run.choose_dilation(p, 10e9, 8, inception) == run.choose_dilation(
            p, 10e9, run.PREFERRED_BYTE_SCALE, inception
        )
    assert run.choose_dilation(16, 10e9, 4, inception) > run.choose_dilation(16, 10e9, 8, inception)


def test_many_short_layers_raise_the_dilation_with_the_nodes(two_cores):
    inception = shipped("inception_v3")  # 420 layers, 0.38 s
    dilations = [run.choose_dilation(p, 10e9, 32, inception) for p in (1, 2, 4, 8, 16)]
    assert dilations == [4, 4, 8, 16, 32]
    for p, d in zip((1, 2, 4, 8, 16), dilations):
        assert run.expected_host_load(inception, p, 1, 32, d, 2) <= run.HOST_CPU_SHARE
        assert d == run.MIN_DILATION or (
            run.expected_host_load(inception, p, 1, 32, d / 2, 2) > run.HOST_CPU_SHARE
        )


def test_a_local_stage_raises_the_dilation(two_cores):
    """Four workers per node cost their node more than one: VGG19-22K's 4 x 4 cell needs
    d = 8 where its four links alone would take d = 4 (at d = 4 its workers took 0.21 of
    the cores and it read 3.6% slower than at d = 32, where they took 0.08), and
    Inception-V3's 283 synchronised layers far more."""
    vgg, inception = shipped("vgg19_22k"), shipped("inception_v3")
    assert run.choose_dilation(4, 10e9, 32) == run.MIN_DILATION
    assert run.choose_dilation(4, 10e9, 32, vgg, per_node=1) == run.MIN_DILATION
    assert run.choose_dilation(4, 10e9, 32, vgg, per_node=4) == 8
    assert run.choose_dilation(4, 10e9, 32, inception, per_node=4) == 256
    one, four = (run.expected_host_load(vgg, 4, g, 32, 8, 2) for g in (1, 4))
    assert four > 4 * one  # four times the workers, and the local stage besides


def measured_cells():
    """The Poseidon cells of the emulations in docs/results with an exact plan and a
    measured host load of at least 0.1 (what the rule acts on), with their profile."""
    results = Path(__file__).resolve().parents[3] / "docs" / "results"
    for path in sorted(results.glob("*.emulated.json")):
        data = json.loads(path.read_text())
        if "--compression" in data["command"] or "titanx" not in data["profile"]:
            continue
        profile = shipped(data["model"])
        for cell in data["cells"]:
            if cell["mode"] == "poseidon" and cell.get("host_load", 0.0) >= 0.1:
                yield path.name, data, cell, profile


def test_the_expected_load_is_the_measured_one_within_a_quarter():
    cells = list(measured_cells())
    assert len(cells) >= 3, [name for name, *_ in cells]
    for name, data, cell, profile in cells:
        expected = run.expected_host_load(profile, cell["nodes"], data.get("workers_per_node", 1),
                                          data["byte_scale"], cell["dilation"], 2)  # fmt: skip
        assert expected == pytest.approx(cell["host_load"], rel=0.25), (name, cell["nodes"])


def test_more_cores_need_less_dilation(monkeypatch):
    inception = shipped("inception_v3")
    monkeypatch.setattr(run.os, "cpu_count", lambda: 16)
    assert run.choose_dilation(16, 10e9, 32, inception) == 8  # this machine's cores
    assert run.choose_dilation(16, 10e9, 32, inception, cores=2) == 32  # another's


def test_a_cell_over_the_budget_is_named_with_the_dilation_to_try():
    note = run.host_load_note("wfbp", 0.37, 8, 2)
    assert note is not None
    assert "0.37 of this machine's 2 cores" in note and "--dilation 16" in note
    assert run.host_load_note("wfbp", run.HOST_CPU_SHARE, 8, 2) is None
    assert run.host_load_note("allreduce", 0.5, 8, 2) is None  # reads right at such loads
