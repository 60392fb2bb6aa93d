"""What the local stage of a machine of CPU workers costs in CPU: per synchronised layer,
the three collectives each worker takes part in (python/poseidon/sync/local.py: the reduce
to the leader, the announcement of the spread layer and the spread), over gloo on
loopback, back to back. Prints the CPU time (all threads of the process) and the wall time
per layer on the leader and on one other worker. The emulation's dilation rule counts
this work (python/poseidon/experiments/run.py, Note [host load]).

    python3 bench/gloo_loopback_cpu.py [--workers 4] [--layers 300] [--floats 256]
"""

from __future__ import annotations

import argparse
import datetime
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _group(store: dist.Store, rank: int, size: int) -> dist.ProcessGroup:
    options = dist.ProcessGroupGloo._Options()
    options._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
    options._timeout = datetime.timedelta(seconds=60)
    return dist.ProcessGroupGloo(store, rank, size, options)


def _worker(rank: int, args: argparse.Namespace, store_path: str) -> None:
    store = dist.FileStore(store_path, args.workers)
    reduce_group = _group(dist.PrefixStore("reduce/", store), rank, args.workers)
    spread_group = _group(dist.PrefixStore("spread/", store), rank, args.workers)
    gradient = torch.ones(args.floats)
    announcement = torch.zeros(1, dtype=torch.int64)
    to_leader = dist.ReduceOptions()
    to_leader.rootRank = 0
    to_leader.reduceOp = dist.ReduceOp.SUM
    from_leader = dist.BroadcastOptions()
    from_leader.rootRank = 0
    for _ in range(2):  # the first pass warms up the groups' connections
        cpu_from, wall_from = time.process_time(), time.monotonic()
        for layer in range(args.layers):
            reduce_group.reduce([gradient], to_leader).wait()
            announcement.fill_(layer)
            spread_group.broadcast([announcement], from_leader).wait()
            spread_group.broadcast([gradient], from_leader).wait()
        cpu_s, wall_s = time.process_time() - cpu_from, time.monotonic() - wall_from
    if rank < 2:
        who = "leader" if rank == 0 else "worker 1"
        print(f"{who}: {args.layers} layers of {args.floats} floats, {args.workers} workers: "
              f"CPU {1e3 * cpu_s / args.layers:.3f} ms per layer, "
              f"wall {1e3 * wall_s / args.layers:.3f} ms per layer", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--layers", type=int, default=300)
    parser.add_argument("--floats", type=int, default=256)
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores; torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as scratch:
        mp.spawn(_worker, args=(args, os.path.join(scratch, "store")), nprocs=args.workers)


if __name__ == "__main__":
    main()
