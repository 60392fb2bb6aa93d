"""pycaffe's multi-process flow (the calls of BVLC's python/train.py) as a test program:
the parent makes a uid and starts one process per solver; each one trains and saves its
parameters for the test to compare.

    nccl_flow.py SOLVER ITERATIONS OUT_DIR COUNT [--start spawn|fork] [--gpu]
                 [--fail-rank R --fail-iter T]

Exit status: 0 when every process succeeded, else the first failing process's status.
`--gpu`: every process computes on CUDA device 0 (set_mode_gpu), else on CPU.
`--fail-rank R --fail-iter T`: process R raises in the forward pass of iteration T.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys

import numpy as np


def solve(solver_path: str, iterations: int, out_dir: str, count: int, uid: bytes, rank: int,
          gpu: bool, fail_rank: int, fail_iter: int) -> None:  # fmt: skip
    import torch

    import caffe

    torch.set_num_threads(1)
    if gpu:
        caffe.set_device(0)
        caffe.set_mode_gpu()
    else:
        caffe.set_mode_cpu()
    caffe.set_solver_count(count)
    caffe.set_solver_rank(rank)
    caffe.set_multiprocess(True)
    solver = caffe.SGDSolver(solver_path)
    nccl = caffe.NCCL(solver, uid)
    nccl.bcast()
    solver.add_callback(nccl)
    if solver.param.layer_wise_reduce:
        solver.net.after_backward(nccl)
    if rank == fail_rank:

        def fail(layer_index: int) -> None:
            if solver.iter == fail_iter:
                raise RuntimeError(f"injected failure at iteration {solver.iter}")

        solver.net.before_forward(fail)
    solver.step(iterations)
    arrays = {f"{name}/{i}": blob.data for name, blobs in solver.net.params.items()
              for i, blob in enumerate(blobs)}  # fmt: skip
    np.savez(os.path.join(out_dir, f"rank{rank}.npz"), **arrays)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("solver")
    parser.add_argument("iterations", type=int)
    parser.add_argument("out_dir")
    parser.add_argument("count", type=int)
    parser.add_argument("--start", default="spawn", choices=("spawn", "fork"))
    parser.add_argument("--gpu", action="store_true")
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-iter", type=int, default=-1)
    args = parser.parse_args()

    import caffe

    uid = caffe.NCCL.new_uid()
    context = multiprocessing.get_context(args.start)
    processes = []
    for rank in range(args.count):
        p = context.Process(target=solve, args=(args.solver, args.iterations, args.out_dir,
                                                args.count, uid, rank, args.gpu,
                                                args.fail_rank, args.fail_iter))  # fmt: skip
        p.daemon = True
        p.start()
        processes.append(p)
    for p in processes:
        p.join()
    for rank, p in enumerate(processes):
        print(f"rank {rank} exit status {p.exitcode}", flush=True)
    return next((p.exitcode for p in processes if p.exitcode), 0)


if __name__ == "__main__":
    sys.exit(main())
