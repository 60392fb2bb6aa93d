"""One worker of a test job: `caffe train`'s distributed path, then the worker's
parameters, per-layer traffic and timeline saved for the test to compare.

    worker.py SOLVER ITERATIONS OUT_DIR     (run by `poseidon launch`)
"""

from __future__ import annotations

import os
import sys

import numpy as np
import torch


def main() -> int:
    solver_path, iterations, out_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    torch.set_num_threads(1)
    from caffe.parallel import attach_from_environment, prepare_worker
    from caffe.solvers import get_solver

    local_rank = prepare_worker()
    solver_param = solver_path
    if os.environ.get("WORKER_GPU_OF_LOCAL_RANK") and torch.cuda.device_count():
        # As `caffe train` does under a launcher: the GPU of the worker's local rank.
        from caffe.formats.proto_io import read_solver_param

        solver_param = read_solver_param(solver_path)
        solver_param.device_id = local_rank % torch.cuda.device_count()
    solver = get_solver(solver_param)
    sync = attach_from_environment(solver)
    if os.environ.get("PERTURB_OTHER_RANKS") and sync.rank > 0:
        # Start away from rank 0's weights: the start's broadcast must bring them back.
        for blobs in solver.net.params.values():
            for blob in blobs:
                blob.data[...] += 0.5
    try:
        solver.step(iterations)
    except BaseException as e:
        sync.close(e)
        raise
    traffic = sync.traffic() if hasattr(sync, "traffic") else {}  # not the all-reduce's
    sync.close()
    arrays = {f"{name}/{i}": blob.data for name, blobs in solver.net.params.items()
              for i, blob in enumerate(blobs)}  # fmt: skip
    for layer_index, (sent, received) in traffic.items():
        arrays[f"traffic/{solver.net._layer_names[layer_index]}"] = np.array([sent, received])
    for r in getattr(sync, "rounds", []):
        arrays[f"scheme/{r.name}"] = np.array(r.scheme)
    np.savez(os.path.join(out_dir, f"rank{sync.rank}.npz"), **arrays)
    return 0


if __name__ == "__main__":
    sys.exit(main())
