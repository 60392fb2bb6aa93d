"""Parsing the experiment commands' quantities."""

from __future__ import annotations

import pytest

from poseidon.experiments.units import format_bandwidth, parse_bandwidth, parse_list, parse_nodes


@pytest.mark.parametrize(
    "text,bps",
    [
        ("10gbit", 10e9),
        ("10GbE", 10e9),
        ("25 Gbit/s", 25e9),
        ("100mbit", 100e6),
        ("1.5e9bps", 1.5e9),
        ("40G", 40e9),
        ("800kbit", 800e3),
    ],
)
def test_bandwidths(text, bps):
    assert parse_bandwidth(text) == pytest.approx(bps)


@pytest.mark.parametrize("text", ["fast", "10", "10 gigs", "-1gbit", "0gbit", ""])
def test_bad_bandwidths_name_the_text(text):
    with pytest.raises(ValueError, match=r"bandwidth"):
        parse_bandwidth(text)


def test_format_bandwidth():
    assert format_bandwidth(10e9) == "10 Gbit/s"
    assert format_bandwidth(2.5e8) == "250 Mbit/s"


def test_nodes():
    assert parse_nodes("16,1,2,4,8,8") == [1, 2, 4, 8, 16]
    with pytest.raises(ValueError, match="at least 1 node"):
        parse_nodes("0,2")
    with pytest.raises(ValueError, match="node counts separated by commas"):
        parse_nodes("1;2")
    with pytest.raises(ValueError, match="no node count"):
        parse_nodes(",")


def test_lists():
    assert parse_list("wfbp,poseidon,wfbp", ("wfbp", "poseidon"), "mode") == ["wfbp", "poseidon"]
    with pytest.raises(ValueError, match=r"mode 'ring': want one or more of wfbp, poseidon"):
        parse_list("wfbp,ring", ("wfbp", "poseidon"), "mode")
