"""poseidon/experiments/every_node.py: the iteration with every node's links simulated."""

from __future__ import annotations

import dataclasses
import random

import pytest

from poseidon.experiments.every_node import (
    WORKER,
    EveryNode,
    Network,
    Stream,
    max_min_rates,
    simulate_iteration,
    simulated,
)
from poseidon.experiments.predict import Compression, Layout, Link, predict_cell
from poseidon.experiments.profile import LayerProfile, SfbTiming, SyncShape
from tests.poseidon.experiments.test_predict import conv, make_profile, relu

MIB_FLOATS = 1 << 18  # 1 MiB of floats: one chunk at the default chunk size
LINK = Link(800e6, goodput=1.0, latency_s=0.0)  # 100 MB/s each way
EVEN = EveryNode(sigma=0.0, lowat_bytes=0, warmup=1, iterations=2, seeds=1)


def flow(up: int, down: int, weight: float = 1.0) -> Stream:
    return Stream(up, down, weight)


def test_weighted_max_min_fills_the_tightest_link_first() -> None:
    flows = [flow(0, 1), flow(0, 2, 3.0), flow(2, 1)]
    # Host 0's uplink carries two flows, weights 1 and 3: a quarter and three quarters.
    # Host 1's downlink then has 0.75 left for the flow from host 2.
    assert max_min_rates(flows, 1.0) == pytest.approx([0.25, 0.75, 0.75])


def test_a_shared_downlink_leaves_the_senders_the_rest() -> None:
    # Three senders into host 3's downlink: a third each; host 0's second flow, to host 4,
    # takes what its uplink has left.
    flows = [flow(0, 3), flow(1, 3), flow(2, 3), flow(0, 4)]
    assert max_min_rates(flows, 1.0) == pytest.approx([1 / 3, 1 / 3, 1 / 3, 2 / 3])


def symmetric_net():  # type: ignore[no-untyped-def]
    # Every layer a whole number of turns of 2 chunks, so each shard owns as much as any
    # other: every node alike, as the predictor assumes.
    layers = [relu("data", 0.01, 0.01), conv("c1", 2 * MIB_FLOATS, 0.02, 0.03),
              relu("r1", 0.005, 0.005), conv("c2", 4 * MIB_FLOATS, 0.01, 0.02)]  # fmt: skip
    return make_profile(layers)


@pytest.mark.parametrize("mode", ["wfbp", "ps-nooverlap"])
def test_even_shares_on_a_symmetric_net_give_the_predictors_iteration(mode: str) -> None:
    profile = symmetric_net()
    fluid = predict_cell(profile, mode, 2, LINK).iteration_s
    assert simulate_iteration(profile, mode, 2, LINK, EVEN) == pytest.approx(fluid, rel=1e-6)


def fc_net():  # type: ignore[no-untyped-def]
    fc = LayerProfile(
        "fc", "InnerProduct", 0.01, 0.02, blobs=[4096 * 4096, 4096],
        sync=SyncShape("FC", 4096, 4096, 8, 4096 * 4097), sfb=SfbTiming(0.004, {8: 1e10}),
    )  # fmt: skip
    return make_profile([relu("data"), fc])


def test_even_shares_give_the_predictors_sfb_iteration() -> None:
    profile = fc_net()
    for nodes in (2, 3):
        fluid = predict_cell(profile, "poseidon", nodes, LINK).iteration_s
        got = simulate_iteration(profile, "poseidon", nodes, LINK, EVEN)
        assert got == pytest.approx(fluid, rel=1e-6)


def test_uneven_shares_make_a_busy_cell_slower_and_depend_on_the_draw() -> None:
    profile = symmetric_net()
    even = simulate_iteration(profile, "wfbp", 4, LINK, EVEN)
    uneven = [
        simulate_iteration(profile, "wfbp", 4, LINK, dataclasses.replace(EVEN, sigma=0.5,
                                                                          seeds=seeds))
        for seeds in (1, 3)
    ]  # fmt: skip
    assert min(uneven) > even * 1.01
    assert uneven[0] != pytest.approx(uneven[1], rel=1e-9)  # three draws are not one


def test_what_stays_on_a_host_crosses_no_link() -> None:
    # The flat layout with every worker on one host: no link, so pure compute.
    profile = symmetric_net()
    one_host = simulate_iteration(profile, "wfbp", 1, LINK, EVEN, layout=Layout(4, False))
    assert one_host == pytest.approx(predict_cell(profile, "wfbp", 1, LINK).iteration_s)


def test_only_saturated_ps_cells_are_simulated() -> None:
    profile = symmetric_net()
    fast = Link(800e9, goodput=1.0, latency_s=0.0)
    busy = Link(400e6, goodput=1.0, latency_s=0.0)
    uneven = dataclasses.replace(EVEN, sigma=0.5)
    for cell, link in ((predict_cell(profile, "wfbp", 2, fast), fast),
                       (predict_cell(profile, "allreduce", 4, busy), busy),
                       (predict_cell(profile, "wfbp", 1, busy), busy)):  # fmt: skip
        assert simulated(cell, profile, link, uneven) is cell
    fluid = predict_cell(profile, "wfbp", 4, busy)
    assert fluid.saturated(busy)
    slow = simulated(fluid, profile, busy, uneven)
    assert slow.every_node and not fluid.every_node
    assert slow.iteration_s > fluid.iteration_s
    assert slow.wait_s == pytest.approx(slow.iteration_s - slow.compute_s - slow.rebuild_s)
    # The estimate lies between the fluid bound and the simulation (Note [between the
    # bounds]): the midpoint by default, the simulation itself with blend 1.
    alone = simulate_iteration(profile, "wfbp", 4, busy, uneven)
    assert slow.bounds_s == (fluid.iteration_s, alone)
    assert slow.iteration_s == pytest.approx((fluid.iteration_s + alone) / 2)
    whole = simulated(fluid, profile, busy, dataclasses.replace(uneven, blend=1.0))
    assert whole.iteration_s == alone and whole.bounds_s == slow.bounds_s
    # A cell whose plan may hold lossy layers keeps its prediction.
    lossy = predict_cell(profile, "poseidon", 4, busy)
    assert lossy.saturated(busy) and simulated(lossy, profile, busy, uneven).every_node
    assert simulated(lossy, profile, busy, uneven, compression=Compression("bf16")) is lossy


def test_what_is_not_simulated_node_by_node_says_so() -> None:
    profile = symmetric_net()
    with pytest.raises(ValueError, match="allreduce"):
        simulate_iteration(profile, "allreduce", 2, LINK)
    with pytest.raises(ValueError, match="'fc': PowerSGD"):
        simulate_iteration(fc_net(), "poseidon", 2, LINK, layer_schemes={"fc": "powersgd"})


def test_local_aggregation_puts_the_leaders_on_the_links_and_the_local_stage_around() -> None:
    profile = symmetric_net()
    local = Link(8e9, goodput=1.0, latency_s=0.0)
    layout = Layout(2, True, local)
    fluid = predict_cell(profile, "wfbp", 2, LINK, layout=layout).iteration_s
    got = simulate_iteration(profile, "wfbp", 2, LINK, EVEN, layout=layout)
    assert got == pytest.approx(fluid, rel=1e-6)
    assert got > simulate_iteration(profile, "wfbp", 2, LINK, EVEN, layout=Layout(2, True))


@pytest.mark.parametrize("depth,urgent_in", [(0.0, 0.6), (1e6, 0.9)])
def test_a_frame_waits_behind_what_its_socket_already_holds(depth: float, urgent_in: float) -> None:
    # One connection at 1 MB/s: a 0.5 MB frame, then a less urgent 0.3 MB one, both queued
    # at 0; a 0.1 MB urgent one at 0.1 s. A socket that holds no second frame sends the
    # urgent one next (in at 0.6 s); one that holds 1 MB took the 0.3 MB frame at once.
    net = Network(Link(8e6, goodput=1.0, latency_s=0.0), 2, 0.0, random.Random(0), 2e6,
                  depth=depth)  # fmt: skip
    arrived: dict[str, float] = {}
    for name, size, priority in (("first", 5e5, 1), ("later", 3e5, 2)):
        net.send(0, WORKER, 1, size, (priority,), lambda t, n=name: arrived.setdefault(n, t))
    net.at(
        0.1, lambda: net.send(0, WORKER, 1, 1e5, (0,), lambda t: arrived.setdefault("urgent", t))
    )
    net.run()
    assert arrived["urgent"] == pytest.approx(urgent_in)


def test_the_observer_sees_every_busy_stretch_and_the_streams_in_it() -> None:
    # Two 0.5 MB frames from host 0 at 1 MB/s, to hosts 1 and 2: both share the uplink for
    # 1 s. A third, to host 1, queued behind the first on its connection at 0, goes alone
    # from 1 s to 1.2 s.
    net = Network(Link(8e6, goodput=1.0, latency_s=0.0), 2, 0.0, random.Random(0), 0.0)
    seen: list[tuple[float, float, int]] = []
    net.observe = lambda start, end, streams: seen.append((start, end, len(streams)))
    for dst, size, priority in ((1, 5e5, 1), (2, 5e5, 1), (1, 2e5, 2)):
        net.send(0, WORKER, dst, size, (priority,), lambda t: None)
    net.run()
    assert [(round(a, 6), round(b, 6), n) for a, b, n in seen] == [(0, 1, 2), (1, 1.2, 1)]
