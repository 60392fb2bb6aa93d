"""One Poseidon worker of bench/scaling.py: warm up, time ITERS iterations between two
barriers (so every worker measures the same window), print rank 0's rate and every
worker's weight checksum (the bench compares them across modes).

    scaling_worker.py SOLVER WARMUP ITERS
"""

from __future__ import annotations

import sys
import time

import torch


def main() -> int:
    solver_path, warmup, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    from caffe.parallel import attach_from_environment, prepare_worker
    from caffe.solvers import get_solver

    prepare_worker()
    solver = get_solver(solver_path)
    sync = attach_from_environment(solver)
    solver.step(warmup)
    sync.barrier("timed")
    start = time.perf_counter()
    solver.step(iters)
    sync.barrier("done")
    elapsed = time.perf_counter() - start
    checksum = float(solver.net.param_data.double().abs().sum())
    print(f"RESULT rank={sync.rank} iters_per_s={iters / elapsed:.4f} checksum={checksum:.9e}",
          flush=True)  # fmt: skip
    sync.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
