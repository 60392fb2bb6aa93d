"""A worker for the launcher tests: joins the job, pushes one layer through the PS, then
exits with status FAIL_CODE if its rank is FAIL_RANK; the others sleep SLEEP_S seconds
and wait at a barrier for every worker (so a dead worker makes them fail). With
POSEIDON_COLOCATE=1 it runs its shard in-process, as caffe.parallel does.

    launch_worker.py [FAIL_RANK FAIL_CODE] [SLEEP_S]
"""

from __future__ import annotations

import sys
import threading
import time

import numpy as np

from poseidon import _C
from poseidon.config import Config


def main() -> int:
    fail_rank = int(sys.argv[1]) if len(sys.argv) > 2 else -1
    fail_code = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    sleep_s = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    config = Config.from_env(role="worker")
    native = config.to_native()
    shard = None
    if config.colocate and config.rank < config.num_servers:
        shard = _C.KVServer(config.replace(role="server").to_native())
        thread = threading.Thread(target=shard.run, daemon=True)
        thread.start()
        native.local_server = shard.local_address
    worker = _C.Worker(native)
    worker.connect()
    worker.plan([_C.LayerSpec(0, "w", _C.LayerKind.OTHER, 4, 1, 1, 4)])
    grad = np.full(4, config.rank + 1, np.float32)
    worker.register_layer(0, grad)
    worker.push_pull(0, 0).wait()
    print(f"rank {config.rank} of {config.num_workers}: sum {grad[0]:g}", flush=True)
    if config.rank == fail_rank:
        return fail_code
    time.sleep(sleep_s)
    worker.barrier("end")
    worker.shutdown()
    if shard is not None:
        thread.join(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
