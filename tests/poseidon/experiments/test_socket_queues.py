"""bench/socket_queues.py: reading a namespace's TCP table, and the shares it prints."""

from __future__ import annotations

import pytest

from tests.poseidon.experiments.bench_scripts import load_bench_script


@pytest.fixture(scope="module")
def socket_queues():  # type: ignore[no-untyped-def]
    return load_bench_script("socket_queues")


# Host 10.77.0.1 (0100... in the kernel's byte order): a listener, a connection to
# 10.77.0.2 with 0x4000 bytes unacknowledged, one to 10.77.0.3 with none, one to itself
# (another process of the host) with bytes, and one closing.
TABLE = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt
   0: 01004D0A:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000
   1: 01004D0A:A000 02004D0A:1F90 01 00004000:00000010 01:00000014 00000000
   2: 01004D0A:A001 03004D0A:1F90 01 00000000:00000000 00:00000000 00000000
   3: 01004D0A:A002 01004D0A:1F90 01 00000100:00000000 00:00000000 00000000
   4: 01004D0A:A003 04004D0A:1F90 08 00000200:00000000 00:00000000 00000000
"""


def test_reads_the_established_connections_to_other_hosts(socket_queues) -> None:  # type: ignore[no-untyped-def]
    assert socket_queues.parse_tcp_table(TABLE) == [
        ("01004D0A:A000", "02004D0A:1F90", 0x4000, 0x10),
        ("01004D0A:A001", "03004D0A:1F90", 0, 0),
    ]


def test_shares_count_only_samples_with_bytes_to_send(socket_queues) -> None:  # type: ignore[no-untyped-def]
    one, two = ("a", "b", 10, 0), ("a", "c", 500, 0)
    idle = ("a", "d", 0, 0)
    samples = [(0.0, 0, [one, idle]), (0.1, 0, [one, two]), (0.2, 0, [idle]), (0.3, 1, [two])]
    summary = socket_queues.summarize(samples, lowat=100)
    assert summary[0]["samples"] == 2
    assert summary[0]["sending"] == {1: 0.5, 2: 0.5}
    assert summary[0]["above_lowat"] == {0: 0.5, 1: 0.5}
    assert summary[1]["above_lowat"] == {1: 1.0}
