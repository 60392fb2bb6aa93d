"""What the emulated links cost this machine's CPU per byte they carry: every host of an
emulation (python/poseidon/experiments/emulation.py) sends to every other with iperf3 at
once, and the machine's busy time (all cores, /proc/stat: the senders' TCP, the veths, the
token buckets, the bridge and the receivers' TCP) is divided by the bytes delivered. Run
with TCP's 64 KiB super-packets (GSO on, the emulation's default) and with single packets
(`--gso off`), side by side. The emulation's dilation rule counts this cost
(python/poseidon/experiments/run.py, Note [link CPU]). Needs root and iperf3.

    .venv/bin/python bench/link_cpu.py [--hosts 4] [--rate 80mbit] [--seconds 8]   (as root)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

from poseidon.experiments.emulation import TCP_GOODPUT_TBF, EmulatedHosts
from poseidon.experiments.units import parse_bandwidth


def busy_cpu_s() -> float:
    """The machine's busy CPU seconds so far, all cores (the first line of /proc/stat, less
    idle and iowait)."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def measure(hosts: int, rate_bps: float, seconds: float, gso: bool) -> dict:
    """All hosts send to all others for `seconds`; the CPU it took per delivered byte."""
    with EmulatedHosts(hosts, rate_bps, gso=gso) as emulated:
        pairs = [(i, j) for i in range(hosts) for j in range(hosts) if i != j]
        servers = [subprocess.Popen([*emulated.exec_prefix(j), "iperf3", "-s", "-1", "-p",
                                     str(5201 + n)], stdout=subprocess.DEVNULL)
                   for n, (_, j) in enumerate(pairs)]  # fmt: skip
        clients: list[subprocess.Popen] = []
        try:
            time.sleep(0.5)  # the servers listen
            busy_from, wall_from = busy_cpu_s(), time.monotonic()
            clients = [subprocess.Popen([*emulated.exec_prefix(i), "iperf3", "-J", "-c",
                                         emulated.addresses[j], "-p", str(5201 + n), "-t",
                                         f"{seconds:g}"], stdout=subprocess.PIPE)
                       for n, (i, j) in enumerate(pairs)]  # fmt: skip
            reports = [json.loads(c.communicate(timeout=seconds + 30)[0]) for c in clients]
            for (i, j), report in zip(pairs, reports):
                if "error" in report:
                    sys.exit(f"link_cpu: iperf3 from host {i} to host {j}: {report['error']}")
            busy_s, wall_s = busy_cpu_s() - busy_from, time.monotonic() - wall_from
            for server in servers:
                server.wait(timeout=30)
        finally:  # on a failure too: nothing of ours outlives the namespaces
            for process in (*clients, *servers):
                if process.poll() is None:
                    process.kill()
                process.wait()
    received_bytes = sum(r["end"]["sum_received"]["bytes"] for r in reports)
    received_bps = sum(r["end"]["sum_received"]["bits_per_second"] for r in reports)
    return {
        "gso": "on" if gso else "off",
        "goodput_of_rate": received_bps / hosts / rate_bps,
        "cores_busy": busy_s / wall_s,
        "cpu_ns_per_byte": 1e9 * busy_s / received_bytes,
        "retransmits": sum(r["end"]["sum_sent"].get("retransmits", 0) for r in reports),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--rate", default="80mbit", help="each link's rate (default 80mbit)")
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args()
    if shutil.which("iperf3") is None:
        sys.exit("link_cpu: needs iperf3 (apt-get install -y iperf3)")
    rate_bps = parse_bandwidth(args.rate)
    print(f"{args.hosts} hosts, all to all, {args.rate} links, "
          f"{args.seconds:g} s each; {os.cpu_count()} cores")  # fmt: skip
    results = [measure(args.hosts, rate_bps, args.seconds, gso) for gso in (True, False)]
    for r in results:
        print(f"GSO {r['gso']:<3}: goodput {r['goodput_of_rate']:.3f} of the rate (tc's framing "
              f"{TCP_GOODPUT_TBF:.3f}), {r['cores_busy']:.2f} cores busy, "
              f"{r['cpu_ns_per_byte']:.1f} ns of CPU per byte delivered, "
              f"{r['retransmits']} retransmits")  # fmt: skip
    print(f"single packets cost {results[1]['cpu_ns_per_byte'] / results[0]['cpu_ns_per_byte']:.2f}"
          " times the CPU per byte of super-packets")  # fmt: skip


if __name__ == "__main__":
    main()
