"""One worker of bench/kv_capped.py, started by `poseidon launch` on an emulated host:
its shard runs in this process (the colocated layout); push-pull rounds of one tensor
between barriers; prints the median round time and the shard's parked-reader time.

    kv_capped_worker.py MEGABYTES ROUNDS [--times]

With --times it also prints each round's start and end on the system's monotonic clock,
which every namespace shares (bench/round_timeline.py lines them up with the links' use).
"""

from __future__ import annotations

import statistics
import sys
import threading
import time

import numpy as np

import poseidon
from poseidon import _C


def main() -> int:
    megabytes, rounds = float(sys.argv[1]), int(sys.argv[2])
    print_times = sys.argv[3:] == ["--times"]
    config = poseidon.Config.from_env(role="worker")
    shard = _C.KVServer(config.replace(role="server").to_native())
    shard_thread = threading.Thread(target=shard.run, daemon=True)
    shard_thread.start()
    native = config.to_native()
    native.local_server = shard.local_address
    worker = _C.Worker(native)
    worker.connect()
    floats = int(megabytes * 2**20) // 4
    worker.plan([_C.LayerSpec(0, "t", _C.LayerKind.OTHER, floats, 1, 1, floats,
                              _C.SchemeChoice.PS)])  # fmt: skip
    tensor = np.empty(floats, dtype=np.float32)
    worker.register_layer(0, tensor)
    want = config.num_workers * (config.num_workers + 1) / 2
    times = []
    for it in range(rounds + 1):  # the first round warms up
        tensor.fill(config.rank + 1)
        worker.barrier(f"round {it}")
        start = time.monotonic()
        worker.push_pull(0, it).wait()
        end = time.monotonic()
        times.append(end - start)
        if print_times:
            print(f"ROUND rank={config.rank} round={it} start={start:.6f} end={end:.6f}",
                  flush=True)  # fmt: skip
        if not tensor.min() == want == tensor.max():
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
