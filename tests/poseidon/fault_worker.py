"""A worker process for the fault tests: settings from the environment (as
under any launcher), one PS layer and one SFB layer, push-pull rounds until
told to stop or killed. Prints "iteration N" after each completed round; on
any Poseidon error prints it to stderr and exits 1."""

from __future__ import annotations

import sys

import numpy as np

from poseidon import _C, CommError
from poseidon.config import Config


def main() -> int:
    cfg = Config.from_env(role="worker")
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    w = _C.Worker(cfg.to_native())
    try:
        w.connect()
        floats = 2_000_000  # 8 MB: every round is many chunks in flight
        w.plan(
            [
                _C.LayerSpec(0, "conv1", _C.LayerKind.CONV, 64, 27, 32, 64 * 27),
                _C.LayerSpec(
                    1, "fc6", _C.LayerKind.OTHER, floats, 1, 32, floats, _C.SchemeChoice.PS
                ),
                _C.LayerSpec(2, "fc7", _C.LayerKind.FC, 64, 64, 8, 64 * 64, _C.SchemeChoice.SFB),
            ]
        )
        conv = np.ones(64 * 27, dtype=np.float32)
        fc6 = np.ones(floats, dtype=np.float32)
        w.register_layer(0, conv)
        w.register_layer(1, fc6)
        w.register_sfb_layer(2, 8 * 128)
        factor = np.full(8 * 128, cfg.rank, dtype=np.float32)
        for t in range(iterations):
            fc6.fill(1.0)
            handles = [w.push_pull(1, t), w.allgather(2, t, factor), w.push_pull(0, t)]
            for h in handles:
                h.wait()
            if fc6[-1] != cfg.num_workers:
                print(f"wrong sum {fc6[-1]} at iteration {t}", file=sys.stderr)
                return 3
            print(f"iteration {t}", flush=True)
        w.shutdown()
    except CommError as e:
        print(f"fault_worker {cfg.rank}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
