"""bench/link_use.py's reading of tc's counters: rate, bytes, drops and the queue's backlog."""

from __future__ import annotations

import pytest

from tests.poseidon.experiments.bench_scripts import load_bench_script


@pytest.fixture(scope="module")
def link_use():  # type: ignore[no-untyped-def]
    return load_bench_script("link_use")


TBF = """qdisc tbf 83f6: root refcnt 3 rate 15625Kbit burst 64Kb lat 16.4ms
 Sent 123456 bytes 97 pkt (dropped 5, overlimits 40 requeues 0)
 backlog 95966b 26p requeues 0
"""


def test_parses_rate_bytes_drops_and_backlog(link_use) -> None:  # type: ignore[no-untyped-def]
    assert link_use.parse_qdisc(TBF) == (15625e3, 123456, 5, 95966)


def test_backlog_with_a_size_suffix_counts_in_1024s(link_use) -> None:  # type: ignore[no-untyped-def]
    assert link_use.parse_qdisc(TBF.replace("95966b", "94Kb"))[3] == 94 * 1024


def test_no_tbf_reads_as_none(link_use) -> None:  # type: ignore[no-untyped-def]
    assert link_use.parse_qdisc("qdisc noqueue 0: root refcnt 2\n") is None


def test_queue_held_is_the_90th_percentile_and_the_most(link_use) -> None:  # type: ignore[no-untyped-def]
    samples = [(float(t), (8e6, 0, 0, 1000 * t)) for t in range(10)]  # 0, 1000, ..., 9000
    assert link_use.queue_held(samples) == (9000.0, 9000.0)
    samples = [(float(t), (8e6, 0, 0, 1000 * t)) for t in range(20)]
    assert link_use.queue_held(samples) == (18000.0, 19000.0)
    assert link_use.queue_held([]) == (0.0, 0.0)
