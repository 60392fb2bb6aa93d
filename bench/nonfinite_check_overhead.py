"""What the per-iteration divergence check costs (caffe/solvers/divergence.py, Note [cheap check]).

Every training iteration the solver checks that the loss (a float already) and the flat
gradient buffer `net.param_diff` (one sum) are finite. This bench trains a net with DummyData
and measures, side by side in one run:

  check     the median time of solver.divergence.check(...) itself, per iteration
  iter      the median time of one solver.step(1) (forward, backward, check, update)
  overhead  check / iter

for cifar10_quick (0.15 M parameters, batch 16 as in its dummy net) and AlexNet (61 M
parameters; batch --alexnet-batch, small by default so that a CPU run takes a minute; a
smaller batch makes the check's share LARGER, so the figure is an upper bound for real
batches). It checks its own result: the guard saw every iteration and found nothing.

    .venv/bin/python bench/nonfinite_check_overhead.py [--iters 20] [--gpu] [--alexnet-batch 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("GLOG_minloglevel", "2")
import torch

import caffe
import caffe.formats.proto_io
from caffe.proto import caffe_pb2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def solver_for(model: str, batch: int | None, directory: str) -> caffe.SGDSolver:
    net_path = os.path.join(ROOT, "models", model, "train_val_dummy.prototxt")
    net = caffe.formats.proto_io.read_net_param(net_path)
    if batch is not None:
        for layer in net.layer:
            if layer.type == "DummyData":
                for shape in layer.dummy_data_param.shape:
                    shape.dim[0] = batch
    param = caffe_pb2.SolverParameter(
        base_lr=0.001, momentum=0.9, weight_decay=0.0005, lr_policy="fixed", max_iter=10**6,
        display=0, snapshot_after_train=False, random_seed=1,
    )  # fmt: skip
    param.net_param.CopyFrom(net)
    param.snapshot_prefix = os.path.join(directory, model)
    return caffe.SGDSolver(param)


def measure(model: str, batch: int | None, iters: int, directory: str) -> dict[str, float]:
    solver = solver_for(model, batch, directory)
    guard = solver.divergence
    check = guard.check
    check_s: list[float] = []

    def timed_check(iteration: int, loss: float) -> None:
        if solver.net.device.type == "cuda":
            torch.cuda.synchronize()  # charge backward to the iteration, not to the check
        start = time.perf_counter()
        check(iteration, loss)
        check_s.append(time.perf_counter() - start)

    guard.check = timed_check  # type: ignore[method-assign]
    solver.step(2)  # warm-up
    check_s.clear()
    iter_s = []
    for _ in range(iters):
        start = time.perf_counter()
        solver.step(1)
        iter_s.append(time.perf_counter() - start)
    if len(check_s) != iters or guard.streak:
        raise SystemExit(f"{model}: the guard saw {len(check_s)} of {iters} iterations")
    check_ms = statistics.median(check_s) * 1e3
    iter_ms = statistics.median(iter_s) * 1e3
    params = solver.net.param_diff.numel()
    return {"params": params, "check_ms": check_ms, "iter_ms": iter_ms}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--alexnet-batch", type=int, default=2)
    parser.add_argument("--gpu", action="store_true")
    args = parser.parse_args()
    if args.gpu:
        caffe.set_mode_gpu()
    else:
        caffe.set_mode_cpu()
    print(f"device: {'cuda' if args.gpu else 'cpu'}, torch threads {torch.get_num_threads()}")
    print(f"{'net':<16}{'params':>12}{'batch':>7}{'check ms':>11}{'iter ms':>11}{'overhead':>10}")
    with tempfile.TemporaryDirectory() as directory:
        for model, batch in (("cifar10_quick", None), ("alexnet", args.alexnet_batch)):
            iters = args.iters if model == "cifar10_quick" else max(3, args.iters // 4)
            r = measure(model, batch, iters, directory)
            shown = batch if batch is not None else 16
            print(
                f"{model:<16}{r['params']:>12,}{shown:>7}{r['check_ms']:>11.3f}"
                f"{r['iter_ms']:>11.1f}{r['check_ms'] / r['iter_ms']:>10.2%}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
