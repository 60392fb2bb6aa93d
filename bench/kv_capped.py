"""KV-store push-pull on emulated hosts with capped links, against the line-rate bound.

P1 = P2 = P hosts, each a network namespace whose link is capped by tc in each direction
(poseidon/experiments/emulation.py), each running one worker with its shard in-process
(the paper's layout).
For each chunk size: the median time of a push-pull round of one S-byte tensor (slowest
worker), beside the bound S·(P1+P2−2)/P2 / rate — the bytes each host must send (and
receive) per round under the cost model, at line rate — and the time shard readers spent
parked (ServerStats.reader_wait_ns, summed over shards and rounds). As the TCP limit of
the same pattern, iperf3 first runs all-to-all between the hosts (every host sending to
every other at once) and the bound is also given at the rate each host reached; "predicted"
is the predictor's model of the same round (`poseidon.experiments.predict.ps_round_s`: the
plan's chunks on a fluid link at tc's goodput), and "miss" how far it is from the round
measured. "retrans", "TLPs" and "RTOs" are the TCP segments the hosts retransmitted, the
tail-loss probes they sent and the retransmission timeouts they took while that row ran
(each namespace's own counters). With `--rto-min-ms` every host's minimum retransmission
timeout is set to that (net.ipv4.tcp_rto_min_us, Linux 6.11 and later), to see how much of
a round the timeouts cost; `--prefix` names the hosts otherwise, so that the bench can run
beside an emulation. Needs root and iperf3.

    sudo .venv/bin/python bench/kv_capped.py [--workers 4] [--megabytes 16]
        [--rate-mbit 100] [--chunks 256KiB,1MiB,4MiB] [--rounds 4] [--queue-ms 50]
        [--rto-min-ms 200] [--prefix pos]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from poseidon.config import parse_bytes  # noqa: E402
from poseidon.experiments.emulation import (  # noqa: E402
    DEFAULT_QUEUE_MS,
    TCP_GOODPUT_TBF,
    EmulatedHosts,
)
from poseidon.experiments.predict import Link, ps_round_s  # noqa: E402

RESULT = re.compile(r"RESULT rank=(\d+) median_s=([\d.]+) parked_s=([\d.]+)")


def launch_rounds(cluster: EmulatedHosts, workers: int, megabytes: float, rounds: int,
                  chunk: str, *worker_args: str) -> str:  # fmt: skip
    """Runs kv_capped_worker.py on the first `workers` hosts; its output, or an error with
    the output's tail if the job failed."""
    command = [sys.executable, "-m", "poseidon.cli", "launch", "-n", str(workers),
               "-s", str(workers), "--hostfile", cluster.hostfile(),
               "--ssh", cluster.ssh_wrapper(), "--port", "29652", "--chunk-bytes", chunk,
               "--", sys.executable, os.path.join(HERE, "kv_capped_worker.py"),
               str(megabytes), str(rounds), *worker_args]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"chunk {chunk}: the job failed:\n{done.stdout[-4000:]}")
    return done.stdout


def run(cluster: EmulatedHosts, args: argparse.Namespace, chunk: str) -> tuple[float, float]:
    found = RESULT.findall(launch_rounds(cluster, args.workers, args.megabytes, args.rounds,
                                         chunk))  # fmt: skip
    if len(found) != args.workers:
        raise RuntimeError(f"chunk {chunk}: {len(found)} of {args.workers} workers reported")
    return max(float(m) for _, m, _ in found), sum(float(p) for _, _, p in found)


def tcp_all_to_all_bits_per_s(cluster: EmulatedHosts, seconds: int = 5) -> float:
    """Mean over hosts of the bits/s each sends when all send to all others at once."""
    hosts = range(cluster.count)
    servers = [subprocess.Popen([*cluster.exec_prefix(i), "iperf3", "-s", "-1", "-p",
                                 str(5300 + j)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
               for i in hosts for j in hosts if i != j]  # fmt: skip
    time.sleep(1)
    clients = [(j, subprocess.Popen([*cluster.exec_prefix(j), "iperf3", "-c",
                                     cluster.addresses[i], "-p", str(5300 + j), "-t",
                                     str(seconds), "-J"], stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL))
               for j in hosts for i in hosts if i != j]  # fmt: skip
    sent = [0.0] * cluster.count
    try:
        for j, client in clients:
            out, _ = client.communicate(timeout=seconds + 30)
            sent[j] += json.loads(out)["end"]["sum_received"]["bits_per_second"]
    finally:
        for server in servers:
            server.kill()
            server.wait()
    return sum(sent) / len(sent)


def tcp_counters(cluster: EmulatedHosts) -> tuple[int, ...]:
    """Segments retransmitted, tail-loss probes sent and retransmission timeouts so far,
    summed over the hosts."""
    fields = (("snmp", "Tcp", "RetransSegs"), ("netstat", "TcpExt", "TCPLossProbes"),
              ("netstat", "TcpExt", "TCPTimeouts"))  # fmt: skip
    totals = [0] * len(fields)
    for i in range(cluster.count):
        tables = {table: subprocess.run([*cluster.exec_prefix(i), "cat", f"/proc/net/{table}"],
                                        capture_output=True, text=True, check=True).stdout
                  for table in ("snmp", "netstat")}  # fmt: skip
        for k, (table, group, name) in enumerate(fields):
            totals[k] += _counter(tables[table], group, name)
    return tuple(totals)


def _counter(text: str, group: str, name: str) -> int:
    """One counter of /proc/net/snmp or /proc/net/netstat: a header line of names followed
    by a line of values, both starting with `group:`."""
    lines = [line.split() for line in text.splitlines() if line.startswith(f"{group}:")]
    for names, values in zip(lines[::2], lines[1::2]):
        if name in names:
            return int(values[names.index(name)])
    raise KeyError(f"{group}:{name} not in the host's counters")


def set_rto_min(cluster: EmulatedHosts, milliseconds: float) -> None:
    for i in range(cluster.count):
        subprocess.run([*cluster.exec_prefix(i), "sysctl", "-q", "-w",
                        f"net.ipv4.tcp_rto_min_us={int(milliseconds * 1000)}"],
                       check=True)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--megabytes", type=float, default=16.0)
    parser.add_argument("--rate-mbit", type=float, default=100.0)
    parser.add_argument("--chunks", default="256KiB,1MiB,4MiB")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--queue-ms", type=float, default=DEFAULT_QUEUE_MS,
                        help="each link's tc queue, milliseconds at the rate")  # fmt: skip
    parser.add_argument("--prefix", default="pos",
                        help="the hosts' names (another runs beside an emulation)")  # fmt: skip
    parser.add_argument("--rto-min-ms", type=float, default=None,
                        help="each host's least retransmission timeout (Linux: 200)")  # fmt: skip
    args = parser.parse_args(argv)
    p = args.workers
    size = args.megabytes * 2**20
    bound = size * (2 * p - 2) / p / (args.rate_mbit * 1e6 / 8)
    print(f"P1 = P2 = {p}, {args.megabytes:g} MiB tensor, links capped at {args.rate_mbit:g} "
          f"Mbit/s each way, queues of {args.queue_ms:g} ms; line-rate bound per round "
          f"{bound:.3f} s")  # fmt: skip
    with EmulatedHosts(p, args.rate_mbit * 1e6, args.prefix, queue_ms=args.queue_ms) as cluster:
        if args.rto_min_ms is not None:
            set_rto_min(cluster, args.rto_min_ms)
            print(f"minimum retransmission timeout {args.rto_min_ms:g} ms on every host")
        tcp = tcp_all_to_all_bits_per_s(cluster)
        tcp_bound = bound * args.rate_mbit * 1e6 / tcp
        print(f"iperf3 all-to-all: {tcp / 1e6:.1f} Mbit/s sent per host; bound at that rate "
              f"{tcp_bound:.3f} s")  # fmt: skip
        print(f"{'chunk':>8} {'round s':>9} {'of bound':>9} {'of TCP':>7} {'parked s':>9} "
              f"{'predicted':>10} {'miss':>6} {'retrans':>8} {'TLPs':>5} {'RTOs':>5}")  # fmt: skip
        link = Link(args.rate_mbit * 1e6, TCP_GOODPUT_TBF)
        for chunk in args.chunks.split(","):
            before = tcp_counters(cluster)
            seconds, parked = run(cluster, args, chunk)
            retransmitted, probes, timeouts = (a - b for a, b in zip(tcp_counters(cluster), before))
            predicted = ps_round_s(int(size) // 4, p, link, parse_bytes(chunk, "--chunks"))
            print(f"{chunk:>8} {seconds:9.3f} {bound / seconds:9.0%} {tcp_bound / seconds:7.0%} "
                  f"{parked:9.2f} {predicted:10.3f} {predicted / seconds - 1:+6.1%} "
                  f"{retransmitted:8d} {probes:5d} {timeouts:5d}",
                  flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
