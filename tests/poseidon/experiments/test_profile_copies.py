"""--copies: processes that measure at the same time, their samples pooled."""

from __future__ import annotations

import pytest

from poseidon.experiments.measure import measure_profile
from tests.poseidon.experiments.nets import SMALL


def test_copies_pool_their_samples(tmp_path):
    path = tmp_path / "small.prototxt"
    path.write_text(SMALL)
    profile = measure_profile(str(path), batch=2, iterations=2, threads=1, copies=2)
    assert profile.measurement["copies"] == 2
    assert profile.device["threads"] == 1
    assert all(layer.forward_s > 0 for layer in profile.layers)
    assert profile.layer("fc").sfb is not None and profile.layer("fc_frozen").sfb is None


def test_a_bad_net_is_bad_input_not_a_crash(tmp_path):
    path = tmp_path / "bad.prototxt"
    path.write_text(SMALL.replace('bottom: "pool" top: "fc"', 'bottom: "nowhere" top: "fc"'))
    with pytest.raises(ValueError, match=r"copy \d of 2 failed: NetError: Unknown bottom blob"):
        measure_profile(str(path), iterations=1, threads=1, copies=2)
