"""KV-store push-pull on emulated hosts with capped links, against the line-rate bound.

P1 = P2 = P hosts, each a network namespace whose link is capped by tc in each direction
(bench/netns.py), each running one worker with its shard in-process (the paper's layout).
For each chunk size: the median time of a push-pull round of one S-byte tensor (slowest
worker), beside the bound S·(P1+P2−2)/P2 / rate — the bytes each host must send (and
receive) per round under the cost model, at line rate — and the time shard readers spent
parked (ServerStats.reader_wait_ns, summed over shards and rounds). Needs root.

    sudo .venv/bin/python bench/kv_capped.py [--workers 4] [--megabytes 16]
        [--rate-mbit 100] [--chunks 256KiB,1MiB,4MiB] [--rounds 4]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from netns import HostCluster  # noqa: E402

RESULT = re.compile(r"RESULT rank=(\d+) median_s=([\d.]+) parked_s=([\d.]+)")


def run(cluster: HostCluster, args: argparse.Namespace, chunk: str) -> tuple[float, float]:
    command = [sys.executable, "-m", "poseidon.cli", "launch", "-n", str(args.workers),
               "-s", str(args.workers), "--hostfile", cluster.hostfile(),
               "--ssh", cluster.ssh_wrapper(), "--port", "29652", "--chunk-bytes", chunk,
               "--", sys.executable, os.path.join(HERE, "kv_capped_worker.py"),
               str(args.megabytes), str(args.rounds)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    found = RESULT.findall(done.stdout)
    if done.returncode != 0 or len(found) != args.workers:
        raise RuntimeError(f"chunk {chunk} failed:\n{done.stdout[-4000:]}")
    return max(float(m) for _, m, _ in found), sum(float(p) for _, _, p in found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--megabytes", type=float, default=16.0)
    parser.add_argument("--rate-mbit", type=float, default=100.0)
    parser.add_argument("--chunks", default="256KiB,1MiB,4MiB")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    p = args.workers
    size = args.megabytes * 2**20
    bound = size * (2 * p - 2) / p / (args.rate_mbit * 1e6 / 8)
    print(f"P1 = P2 = {p}, {args.megabytes:g} MiB tensor, links capped at {args.rate_mbit:g} "
          f"Mbit/s each way; line-rate bound per round {bound:.3f} s")  # fmt: skip
    print(f"{'chunk':>8} {'round s':>9} {'of bound':>9} {'parked s':>9}")
    with HostCluster(p, args.rate_mbit) as cluster:
        for chunk in args.chunks.split(","):
            seconds, parked = run(cluster, args, chunk)
            print(f"{chunk:>8} {seconds:9.3f} {bound / seconds:9.0%} {parked:9.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
