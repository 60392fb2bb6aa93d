"""Each scheme's compute, timed at a layer's shapes before the plan (poseidon/sync/measure.py):
which phases are timed for which layer, that the times are real (positive, growing with the
work), that a large layer is timed on a slice and scaled, and that the plan ranks with them."""

from __future__ import annotations

import pytest
import torch

from poseidon import _C
from poseidon.plan import layer_spec
from poseidon.sync import measure
from poseidon.sync.measure import measure_scheme_costs

CPU = torch.device("cpu")


def specs() -> list:
    return [layer_spec(0, "conv", "conv", 64, 288, 1, 64 * 288 + 64),
            layer_spec(1, "fc", "FC", 512, 256, 32, 512 * 256 + 512),
            layer_spec(2, "forced", "FC", 512, 256, 32, 512 * 256, force="ps")]  # fmt: skip


def test_exact_plans_time_only_sfb_and_the_backward_given() -> None:
    s = specs()
    measure_scheme_costs(s, 4, _C.Compression.NONE, 4, CPU, backward_s={0: 0.5, 2: 0.25})
    conv, fc, forced = (x.measured for x in s)
    assert conv.backward_s == 0.5 and conv.sfb_rebuild_s == 0 and conv.bf16_encode_s == 0
    assert conv.powersgd_encode_s == 0
    assert fc.sfb_rebuild_s > 0 and fc.dw_s > 0 and fc.powersgd_encode_s == 0
    # A forced layer's scheme is not the model's to choose: only its backward is kept.
    assert forced.backward_s == 0.25 and forced.sfb_rebuild_s == 0 and forced.dw_s == 0


def test_auto_times_every_candidate_phase() -> None:
    s = specs()
    measure_scheme_costs(s, 4, _C.Compression.AUTO, 4, CPU)
    conv, fc, _ = (x.measured for x in s)
    for m in (conv, fc):
        assert m.bf16_encode_s > 0 and m.bf16_finish_s > 0
        assert m.powersgd_encode_s > 0 and m.powersgd_between_s > 0 and m.powersgd_finish_s > 0
    # One worker has nothing to rebuild from.
    alone = specs()
    measure_scheme_costs(alone, 1, _C.Compression.AUTO, 4, CPU)
    assert alone[1].measured.sfb_rebuild_s == 0


def test_the_rebuild_grows_with_the_rows() -> None:
    small = min(measure.time_weight_product(1024, 1024, 8, CPU) for _ in range(3))
    large = min(measure.time_weight_product(1024, 1024, 512, CPU) for _ in range(3))
    assert large > 4 * small  # 64× the flops


def test_a_large_layer_is_timed_on_a_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    assert measure._timed_rows(100, 10) == (100, 1.0)
    monkeypatch.setattr(measure, "MAX_TIMED_FLOATS", 200)
    assert measure._timed_rows(100, 10) == (20, 5.0)
    assert measure._timed_rows(100, 1000) == (2, 50.0)  # never fewer than 2 rows
    calls = []
    monkeypatch.setattr(measure, "median_seconds", lambda work, device: calls.append(1) or 0.1)
    assert measure.time_weight_product(100, 10, 4, CPU) == pytest.approx(0.5)
    assert measure.time_bf16(1000, CPU) == (pytest.approx(0.5), pytest.approx(0.5))


def test_the_plan_ranks_with_the_measured_costs() -> None:
    """The same layer and link: a rebuild measured as slow moves the pick off SFB."""
    link = _C.Rates(1e9, 0, 0)

    def pick(rebuild_s: float) -> str:
        spec = layer_spec(0, "fc", "FC", 512, 256, 32, 512 * 256)
        costs = _C.MeasuredCosts()
        costs.sfb_rebuild_s = rebuild_s
        spec.measured = costs
        plan = _C.make_plan([spec], 4, 4, rates=link)
        return _C.scheme_name(plan.layers[0].scheme)

    assert pick(1e-6) == "SFB"
    assert pick(10.0) == "PS"
