"""One worker of bench/kv_capped.py, started by `poseidon launch` on an emulated host:
its shard runs in this process (the colocated layout); push-pull rounds of one tensor
between barriers; prints the median round time and the shard's parked-reader time.

    kv_capped_worker.py MEGABYTES ROUNDS [--times] [--tensors N]

With --times it also prints each round's start and end on the system's monotonic clock,
which every namespace shares (bench/round_timeline.py lines them up with the links' use).
With --tensors N the bytes are N tensors of equal size (layers 0 … N−1), all pushed at the
start of a round, the last layer first as a backward pass hands them over, and the round
ends when every sum is in.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time

import numpy as np

import poseidon
from poseidon import _C


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("megabytes", type=float)
    parser.add_argument("rounds", type=int)
    parser.add_argument("--times", action="store_true")
    parser.add_argument("--tensors", type=int, default=1)
    args = parser.parse_args()
    config = poseidon.Config.from_env(role="worker")
    shard = _C.KVServer(config.replace(role="server").to_native())
    shard_thread = threading.Thread(target=shard.run, daemon=True)
    shard_thread.start()
    native = config.to_native()
    native.local_server = shard.local_address
    worker = _C.Worker(native)
    worker.connect()
    floats = int(args.megabytes * 2**20) // 4 // args.tensors
    worker.plan([_C.LayerSpec(i, f"t{i}", _C.LayerKind.OTHER, floats, 1, 1, floats,
                              _C.SchemeChoice.PS) for i in range(args.tensors)])  # fmt: skip
    tensors = [np.empty(floats, dtype=np.float32) for _ in range(args.tensors)]
    for layer, tensor in enumerate(tensors):
        worker.register_layer(layer, tensor)
    want = config.num_workers * (config.num_workers + 1) / 2
    times = []
    for it in range(args.rounds + 1):  # the first round warms up
        for tensor in tensors:
            tensor.fill(config.rank + 1)
        worker.barrier(f"round {it}")
        start = time.monotonic()
        pending = [worker.push_pull(layer, it) for layer in reversed(range(args.tensors))]
        for handle in pending:
            handle.wait()
        end = time.monotonic()
        times.append(end - start)
        if args.times:
            print(f"ROUND rank={config.rank} round={it} start={start:.6f} end={end:.6f}",
                  flush=True)  # fmt: skip
        if not all(t.min() == want == t.max() for t in tensors):
            raise AssertionError(f"worker {config.rank}: wrong sum in round {it}")
    worker.barrier("end")
    worker.shutdown()
    shard_thread.join(60)
    stats = shard.stats()
    print(f"RESULT rank={config.rank} median_s={statistics.median(times[1:]):.4f} "
          f"parked_s={stats.reader_wait_ns / 1e9:.3f}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
