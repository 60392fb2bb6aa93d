"""What the emulated links lost (emulation.py, Note [link losses]): the parsers on the
kernel's own text, and, as root, two hosts sending into a third's link at once, which
overflows its queue; with GSO off the links carry single packets (Note [packets, not GSO
bursts])."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from poseidon.experiments.emulation import (
    EmulatedHosts,
    EmulationError,
    LinkLosses,
    qdisc_drops,
    tcp_retransmits,
)

TBF_STATS = """\
qdisc tbf 8056: root refcnt 3 rate 62500Kbit burst 64Kb lat 41.6ms
 Sent 217848132 bytes 156289 pkt (dropped 30, overlimits 44536 requeues 0)
 backlog 0b 0p requeues 0
qdisc noqueue 0: dev lo root refcnt 2
 Sent 0 bytes 0 pkt (dropped 2, overlimits 0 requeues 0)
"""

SNMP = """\
Ip: Forwarding DefaultTTL InReceives
Ip: 1 64 1000
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets \
CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 12 10 0 1 4 9000 8000 271 0 3 0
Udp: InDatagrams NoPorts
Udp: 0 0
"""


def test_drops_are_summed_over_the_qdiscs_shown() -> None:
    assert qdisc_drops(TBF_STATS) == 32
    assert qdisc_drops("") == 0


def test_retransmits_are_read_by_the_column_name() -> None:
    assert tcp_retransmits(SNMP) == 271


def test_text_without_the_counter_is_an_error_that_quotes_it() -> None:
    with pytest.raises(EmulationError, match=r"RetransSegs.*Udp"):
        tcp_retransmits("Udp: InDatagrams NoPorts\nUdp: 0 0\n")


def test_losses_subtract_field_by_field() -> None:
    assert LinkLosses(10, 3, 7) - LinkLosses(4, 1, 7) == LinkLosses(6, 2, 0)


SEND = """
import socket, sys, time
for _ in range(100):  # until the receiver listens
    try:
        s = socket.create_connection((sys.argv[1], 5001), timeout=30)
        break
    except ConnectionRefusedError:
        time.sleep(0.1)
s.sendall(b"x" * (2 << 20))
s.close()
"""

RECEIVE = """
import socket
server = socket.create_server(("0.0.0.0", 5001), backlog=4)
server.settimeout(30)
for _ in range(2):
    conn, _ = server.accept()
    conn.settimeout(30)
    while conn.recv(1 << 16):
        pass
    conn.close()
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"),
    reason="emulation needs root and iproute2",
)
def test_two_senders_into_one_link_overflow_its_queue() -> None:
    # Each sender's own link lets 20 Mbit/s out; the receiver's takes 20 Mbit/s in, so its
    # queue (64 KiB, the bucket's least) grows at 20 Mbit/s until it drops.
    with EmulatedHosts(3, 20e6, prefix="pll", subnet="10.79.0", queue_ms=1) as hosts:
        quiet = hosts.losses()
        receiver = subprocess.Popen([*hosts.exec_prefix(2), sys.executable, "-c", RECEIVE])
        try:
            to_receiver = [sys.executable, "-c", SEND, hosts.addresses[2]]
            senders = [subprocess.Popen([*hosts.exec_prefix(i), *to_receiver]) for i in (0, 1)]
            assert [s.wait(timeout=60) for s in senders] == [0, 0]
            assert receiver.wait(timeout=60) == 0
        finally:
            receiver.kill()
        lost = hosts.losses() - quiet
    # The receiver's port drops (two senders at full rate into one link); its retransmits.
    assert lost.dropped_in > 0 and lost.retransmitted > 0, lost


def gso_max_segs(hosts: EmulatedHosts, host: int) -> int:
    show = [*hosts.exec_prefix(host), "ip", "-d", "link", "show", hosts.inner(host)]
    shown = subprocess.run(show, capture_output=True, text=True, check=True)
    return int(shown.stdout.split("gso_max_segs ")[1].split()[0])


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"),
    reason="emulation needs root and iproute2",
)
def test_links_carry_single_packets_when_gso_is_off() -> None:
    with EmulatedHosts(2, 20e6, prefix="pgs", subnet="10.80.0", gso=False) as hosts:
        assert [gso_max_segs(hosts, i) for i in (0, 1)] == [1, 1]
    with EmulatedHosts(2, 20e6, prefix="pgs", subnet="10.80.0") as hosts:
        assert gso_max_segs(hosts, 0) > 1
