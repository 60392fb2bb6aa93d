"""WFBP is real (the timeline shows each layer's sync starting before the backward of
the layer below it ends) and the bytes each worker moves match the cost model."""

from __future__ import annotations

import glob
import json
import math

import pytest

from tests.caffe.parallel.job import BATCH, run_job

ITERS = 6


def load_timeline(pattern: str) -> list[dict]:
    (path,) = glob.glob(pattern)
    with open(path) as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def backward_ends(events: list[dict]) -> dict[tuple[int, int], float]:
    """(iteration, layer index) -> end of that layer's backward span."""
    return {
        (e["args"]["iteration"], e["args"]["layer"]): e["ts"] + e["dur"]
        for e in events
        if e["cat"] == "compute" and e["name"].startswith("backward ")
    }


def sync_starts(events: list[dict], layer_index: dict[str, int]) -> dict[tuple[int, int], float]:
    return {
        (e["args"]["iteration"], layer_index[e["name"]]): e["ts"]
        for e in events
        if e["cat"] == "sync" and e["args"]["iteration"] >= 0
    }


LAYERS = {"data": 0, "conv1": 1, "relu1": 2, "pool1": 3, "conv2": 4, "ip1": 5, "relu2": 6,
          "ip2": 7, "loss": 8}  # fmt: skip


@pytest.mark.parametrize("sync", ["wfbp", "poseidon"])
def test_each_layer_sync_starts_before_the_backward_below_ends(tmp_path, sync):
    timeline = str(tmp_path / "trace.json")
    run_job(str(tmp_path), 2, 2, sync, "auto", ITERS, timeline=timeline)
    for rank in (0, 1):
        events = load_timeline(str(tmp_path / f"trace.{rank}.json"))
        ends, starts = backward_ends(events), sync_starts(events, LAYERS)
        assert {layer for _, layer in starts} == {1, 4, 5, 7}
        checked = 0
        for (iteration, layer), start in starts.items():
            below = (iteration, layer - 1)
            if layer - 1 >= 1:
                assert start < ends[below], f"rank {rank} iteration {iteration} layer {layer}"
                checked += 1
        assert checked == 3 * ITERS
        assert_phases_in_order(events)


def assert_phases_in_order(events: list[dict]) -> None:
    """Per layer and iteration: queued, then sending, within the whole sync round."""
    spans = {(e["cat"], e["name"], e["args"]["iteration"]): e for e in events
             if e["cat"] in ("sync", "queued", "sending")}  # fmt: skip
    rounds = [key for key in spans if key[0] == "sync" and key[2] >= 0]
    assert rounds
    for _, name, iteration in rounds:
        sync = spans[("sync", name, iteration)]
        queued = spans[("queued", name, iteration)]
        sending = spans[("sending", name, iteration)]
        slack = 1.0  # µs: the clocks agree, float rounding does not quite
        assert sync["ts"] - slack <= queued["ts"]
        assert queued["ts"] + queued["dur"] <= sending["ts"] + slack
        assert sending["ts"] + sending["dur"] <= sync["ts"] + sync["dur"] + slack


def test_without_overlap_every_sync_starts_after_the_whole_backward(tmp_path):
    timeline = str(tmp_path / "trace.json")
    run_job(str(tmp_path), 2, 1, "ps-nooverlap", "auto", ITERS, timeline=timeline)
    events = load_timeline(str(tmp_path / "trace.0.json"))
    ends, starts = backward_ends(events), sync_starts(events, LAYERS)
    for (iteration, _layer), start in starts.items():
        assert start > ends[(iteration, 0)]  # after the last backward step (layer 0)


def test_bytes_per_iteration_match_the_cost_model(tmp_path):
    from poseidon import _C

    workers, servers, iters = 3, 2, 10
    ranks, _ = run_job(str(tmp_path), workers, servers, "poseidon", "auto", iters)
    traffic = {k.split("/")[1]: v for k, v in ranks[1].items() if k.startswith("traffic/")}
    # ip1 (24 outputs × 54 inputs) is an SFB layer; ip2 (4 × 24 + 4 bias) goes by PS.
    assert str(ranks[1]["scheme/ip1"]) == "SFB" and str(ranks[1]["scheme/ip2"]) == "PS"
    ip1 = _C.comm_cost(24, 54, BATCH, workers, servers)
    sfb_measured = float(sum(traffic["ip1"])) / iters  # rank 1 sends nothing at the broadcast
    assert math.isclose(sfb_measured, ip1.sfb_bytes, rel_tol=0.10), (sfb_measured, ip1.sfb_bytes)
    ip2 = _C.comm_cost(4, 24, BATCH, workers, servers)
    ps_measured = float(sum(traffic["ip2"])) / (iters + 1)  # + the initial broadcast round
    worker_ps_bytes = 4 * ip2.ps_worker_floats
    assert math.isclose(ps_measured, worker_ps_bytes, rel_tol=0.10), (ps_measured, worker_ps_bytes)
