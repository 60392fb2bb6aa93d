"""Where a push-pull round on capped links loses time to the predictor's fluid link: the
links' use through each round, and when each host's last byte went.

Runs bench/kv_capped.py's worker (one tensor, push-pull rounds between barriers, P1 = P2 = P
emulated hosts, each shard in its worker's process) and, while it runs, reads every bridge
port's byte counters (/sys/class/net/<prefix>b<i>/statistics: rx is what host i sent, tx
what it received) every few milliseconds. Per round (between the workers' barriers,
from the first worker's start to the last one's end): its length beside the predictor's
round (`ps_round_s`), the hosts' uplinks' mean use over it (Ethernet bytes over the line
rate), and when each host sent its last byte, counted from the round's first: the spread of
those is the wait of a bulk-synchronous round for its slowest host, which the predictor's
one node, standing for all of them, does not have. `--bins` prints the use of every link
per 50 ms. Needs root.

    sudo .venv/bin/python bench/round_timeline.py [--workers 4] [--rate-mbit 25]
        [--megabytes 4] [--chunk 1MiB] [--rounds 4] [--tensors 1] [--queue-ms 50] [--bins]
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import re
import sys
import threading
import time

from kv_capped import launch_rounds  # this folder: the script's own, first on sys.path

from poseidon.config import parse_bytes
from poseidon.experiments.emulation import TCP_GOODPUT_TBF, EmulatedHosts
from poseidon.experiments.predict import Link, ps_round_s

PERIOD_S = 0.005
BIN_S = 0.05
QUIET = 0.05  # a host whose uplink carries less than this share of its rate is done
ROUND = re.compile(r"ROUND rank=(\d+) round=(\d+) start=([\d.]+) end=([\d.]+)")


class Counters:
    """Samples every host's bytes sent and received, as the bridge port towards it counts."""

    def __init__(self, prefix: str, hosts: int) -> None:
        self.paths = [(f"/sys/class/net/{prefix}b{i}/statistics/rx_bytes",
                       f"/sys/class/net/{prefix}b{i}/statistics/tx_bytes")
                      for i in range(hosts)]  # fmt: skip
        self.samples: list[tuple[float, list[int], list[int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Counters:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            sent, received = [], []
            for rx, tx in self.paths:
                with open(rx) as f:
                    sent.append(int(f.read()))
                with open(tx) as f:
                    received.append(int(f.read()))
            self.samples.append((time.monotonic(), sent, received))
            time.sleep(PERIOD_S)


def binned(samples: list, rate_bytes: float) -> list[tuple[float, list[float], list[float]]]:
    """(start, each uplink's use, each downlink's use) per BIN_S, from the first sample."""
    out, start, k = [], samples[0][0], 0
    while True:
        end = start + BIN_S
        j = k
        while j < len(samples) - 1 and samples[j][0] < end:
            j += 1
        if j == k:
            return out
        (t0, s0, r0), (t1, s1, r1) = samples[k], samples[j]
        span = (t1 - t0) * rate_bytes
        out.append((t0 - samples[0][0], [(b - a) / span for a, b in zip(s0, s1)],
                    [(b - a) / span for a, b in zip(r0, r1)]))  # fmt: skip
        start, k = t1, j


def sent_between(samples: list, first: float, end: float) -> float:
    """Bytes all hosts sent between the samples nearest `first` and `end` (monotonic)."""
    times = [t for t, _, _ in samples]
    a = samples[min(bisect.bisect_left(times, first), len(samples) - 1)]
    b = samples[min(bisect.bisect_left(times, end), len(samples) - 1)]
    return float(sum(b[1]) - sum(a[1]))


def last_sent(samples: list, first: float, end: float, rate_bytes: float) -> list[float]:
    """When each host last sent at more than QUIET of its rate between `first` and `end`
    (monotonic), counted from `first`."""
    hosts = len(samples[0][1])
    last = [0.0] * hosts
    for (t0, s0, _), (t1, s1, _) in itertools.pairwise(samples):
        if t0 < first or t1 > end:
            continue
        for host in range(hosts):
            if s1[host] - s0[host] > QUIET * rate_bytes * (t1 - t0):
                last[host] = t1 - first
    return last


def worker_rounds(cluster: EmulatedHosts, args: argparse.Namespace) -> list[tuple[float, float]]:
    """Runs the rounds; each one's (first start, last end) over the workers, monotonic."""
    output = launch_rounds(cluster, args.workers, args.megabytes, args.rounds, args.chunk,
                           "--times", "--tensors", str(args.tensors))  # fmt: skip
    found = ROUND.findall(output)
    if len(found) != args.workers * (args.rounds + 1):
        raise RuntimeError(f"{len(found)} round times, want {args.workers * (args.rounds + 1)}:"
                           f"\n{output[-4000:]}")  # fmt: skip
    spans: dict[int, tuple[float, float]] = {}
    for _, number, start, end in found:
        first, last = spans.get(int(number), (float("inf"), 0.0))
        spans[int(number)] = (min(first, float(start)), max(last, float(end)))
    return [spans[k] for k in sorted(spans)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rate-mbit", type=float, default=25.0)
    parser.add_argument("--megabytes", type=float, default=4.0)
    parser.add_argument("--chunk", default="1MiB")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--tensors", type=int, default=1,
                        help="the bytes as that many tensors, all pushed at once")  # fmt: skip
    parser.add_argument("--queue-ms", type=float, default=50.0)
    parser.add_argument("--prefix", default="kvc")
    parser.add_argument("--bins", action="store_true", help="print every link's use per 50 ms")
    args = parser.parse_args(argv)
    rate_bytes = args.rate_mbit * 1e6 / 8
    link = Link(args.rate_mbit * 1e6, TCP_GOODPUT_TBF)
    size = int(args.megabytes * 2**20)
    predicted = ps_round_s(size // 4, args.workers, link, parse_bytes(args.chunk, "--chunk"),
                           tensors=args.tensors)  # fmt: skip
    with (
        EmulatedHosts(args.workers, args.rate_mbit * 1e6, args.prefix,
                      queue_ms=args.queue_ms) as cluster,
        Counters(args.prefix, args.workers) as counters,
    ):  # fmt: skip
        spans = worker_rounds(cluster, args)
    bins = binned(counters.samples, rate_bytes) if args.bins else []
    what = (
        f"{args.megabytes:g} MiB tensor"
        if args.tensors == 1
        else f"{args.megabytes:g} MiB in {args.tensors} tensors"
    )
    print(f"P1 = P2 = {args.workers}, {what}, {args.chunk} chunks, links "
          f"{args.rate_mbit:g} Mbit/s, queues {args.queue_ms:g} ms; predicted round "
          f"{predicted:.3f} s (the first round warms up)")  # fmt: skip
    origin = counters.samples[0][0]
    for number, (first, last_end) in enumerate(spans):
        length = last_end - first
        use = sent_between(counters.samples, first, last_end) / (length * rate_bytes * args.workers)
        last = last_sent(counters.samples, first, last_end, rate_bytes)
        print(
            f"round {number}: {length:.2f} s ({predicted / length - 1:+.0%}), uplinks "
            f"{use:.0%} used; each host's last bytes at "
            f"{' '.join(f'{t:.2f}' for t in last)} s (spread {max(last) - min(last):.2f} s)"
        )
        for start, up, down in bins:
            if first - origin <= start < last_end - origin:
                print(f"  {start - (first - origin):6.2f} s  up "
                      + " ".join(f"{u:4.0%}" for u in up)
                      + "   down " + " ".join(f"{d:4.0%}" for d in down))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
