"""bench/multinode_rounds.py: every node simulated, against the predictor's one node."""

from __future__ import annotations

import random

import pytest

from poseidon.experiments.every_node import Network
from poseidon.experiments.predict import Link, ps_round_s, tensor_chunks
from tests.poseidon.experiments.bench_scripts import load_bench_script

B = 1e6  # bytes/s each way
LINK = Link(8 * B, goodput=1.0, latency_s=0.0)


@pytest.fixture(scope="module")
def sim():  # type: ignore[no-untyped-def]
    return load_bench_script("multinode_rounds")


def rounds(sim, nodes, megabytes, chunk, sigma, lowat, count=3, tensors=1):  # type: ignore[no-untyped-def]
    net = Network(LINK, 2, sigma, random.Random(0), lowat)
    layers = tensor_chunks(int(megabytes * 2**20) // 4, nodes, chunk, tensors)
    return [sim.simulate_round(net, nodes, layers, r) for r in range(count)]


@pytest.mark.parametrize("nodes,megabytes,chunk,tensors", [(2, 4, 1 << 20, 1),
                                                           (4, 4, 1 << 20, 1),
                                                           (4, 2, 256 << 10, 4),
                                                           (8, 4, 1 << 20, 1)])  # fmt: skip
def test_even_shares_give_the_predictors_round(sim, nodes, megabytes, chunk, tensors) -> None:  # type: ignore[no-untyped-def]
    # sigma = 0: every node alike, so the one node the predictor simulates stands for all,
    # with or without threads freed at the low-water mark.
    fluid = ps_round_s(int(megabytes * 2**20) // 4, nodes, LINK, chunk, tensors=tensors)
    for lowat in (0, 256 << 10):
        got = rounds(sim, nodes, megabytes, chunk, 0.0, lowat, tensors=tensors)
        assert got == pytest.approx([fluid] * 3, rel=1e-6)


def test_uneven_shares_lengthen_rounds_of_big_frames_more(sim) -> None:  # type: ignore[no-untyped-def]
    fluid = ps_round_s(1 << 20, 4, LINK, 1 << 20)
    big = rounds(sim, 4, 4, 1 << 20, 0.3, 256 << 10, count=6)
    small = rounds(sim, 4, 4, 32 << 10, 0.3, 256 << 10, count=6)
    # Never faster than the fluid round: it is the bound of every node's bytes at line rate.
    assert min(big + small) >= fluid * (1 - 1e-9)
    # Small frames fit under the low-water mark and never hold a thread: the links stay busy.
    assert sum(small) / 6 < sum(big) / 6
    # Held to the whole frame (no low-water mark), the same small frames stall the threads.
    held = rounds(sim, 4, 4, 32 << 10, 0.3, 0, count=6)
    assert sum(small) / 6 < sum(held) / 6
