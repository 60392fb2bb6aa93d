"""CPU pooling, PyTorch's NCHW kernel vs oneDNN's: the zoo nets' MAX pools (forward+backward)
and AVE pools (forward; AVE's backward stays PyTorch's, Note [AVE divisor]).

Why: caffe/layers/pooling.py pools MAX, and AVE where oneDNN's divisor is Caffe's, through
oneDNN on CPU (caffe/layers/_onednn_pooling.py), conversions in and out included; this bench
times that beside what it replaced (PyTorch's max_pool2d_with_indices into the blob and its
backward from the indices; avg_pool2d into the blob), on the pooling shapes of the
engine-vs-torch nets at their bench batch sizes. Rounds alternate the two;
the ratio (PyTorch ms / oneDNN ms, > 1: oneDNN is faster) is the median over neighbouring
pairs of rounds, as in bench/engine_vs_torch.py.

    .venv/bin/python bench/pooling_kernels.py [--rounds 9] [--iters 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import torch

from caffe.blob import Blob
from caffe.layers._onednn_pooling import OneDnnMaxPool, ave_include_padding, ave_pool_forward

# name -> (input shape, kernel, stride): bench/engine_vs_torch.py's nets and batches
POOLS = {
    "lenet pool1": ((64, 20, 24, 24), 2, 2),
    "lenet pool2": ((64, 50, 8, 8), 2, 2),
    "cifar10_quick pool1": ((100, 32, 32, 32), 3, 2),
    "alexnet pool1": ((8, 96, 55, 55), 3, 2),
    "alexnet pool2": ((8, 256, 27, 27), 3, 2),
    "alexnet pool5": ((8, 256, 13, 13), 3, 2),
    "vgg19 pool1 (batch 8)": ((8, 64, 224, 224), 2, 2),
}
# AVE: name -> (input shape, kernel, stride, pad)
AVE_POOLS = {
    "cifar10_quick pool2": ((100, 32, 16, 16), 3, 2, 0),
    "cifar10_quick pool3": ((100, 64, 8, 8), 3, 2, 0),
    "googlenet pool5 (b 8)": ((8, 1024, 7, 7), 7, 1, 0),
    "inception_v3 3x3 (b 8)": ((8, 192, 35, 35), 3, 1, 1),
}


def pytorch_step(x: torch.Tensor, k: int, s: int, dy: torch.Tensor) -> Callable[[], None]:
    aten = torch.ops.aten
    y, idx = aten.max_pool2d_with_indices(x, [k, k], [s, s], [0, 0], [1, 1], True)
    dx = torch.empty_like(x)

    def step() -> None:
        aten.max_pool2d_with_indices.out(x, [k, k], [s, s], [0, 0], [1, 1], True, out=y,
                                         indices=idx)  # fmt: skip
        aten.max_pool2d_with_indices_backward.grad_input(
            dy, x, [k, k], [s, s], [0, 0], [1, 1], True, idx, grad_input=dx
        )

    return step


def onednn_step(x: torch.Tensor, k: int, s: int, dy: torch.Tensor) -> Callable[[], None]:
    pool = OneDnnMaxPool((k, k), (s, s), (0, 0), True)
    top, bottom = Blob(dy.shape), Blob(x.shape)
    top.diff_tensor.copy_(dy)

    def step() -> None:
        pool.forward(x, top, keep=True)
        pool.backward(top.diff_tensor, bottom)

    return step


def ave_steps(x: torch.Tensor, k: int, s: int, p: int) -> tuple[Callable[[], None], ...]:
    """(PyTorch's forward into the blob, oneDNN's) for one AVE pool."""
    y = torch.nn.functional.avg_pool2d(x, k, s, p, ceil_mode=True)
    top = Blob(y.shape)
    include = ave_include_padding(tuple(x.shape[2:]), tuple(y.shape[2:]), (k, k), (s, s), (p, p))
    assert include is not None, "a pool whose divisor oneDNN does not give"

    def pytorch() -> None:
        torch.ops.aten.avg_pool2d.out(x, [k, k], [s, s], [p, p], True, True, None,
                                      out=top.data_tensor)  # fmt: skip

    def onednn() -> None:
        ave_pool_forward(x, top, (k, k), (s, s), (p, p), True, include)

    return pytorch, onednn


def time_ms(step, iters: int) -> float:
    start = time.perf_counter()
    for _ in range(iters):
        step()
    return (time.perf_counter() - start) * 1000 / iters


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--iters", type=int, default=10)
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; MAX, ceil mode, "
          "forward+backward")  # fmt: skip
    print(f"{'pool':<23}{'input':>20}{'k/s':>5}{'pytorch ms':>12}{'onednn ms':>11}{'ratio':>8}")
    for name, (shape, k, s) in POOLS.items():
        x = torch.randn(shape)
        y = torch.nn.functional.max_pool2d(x, k, s, ceil_mode=True)
        dy = torch.randn(y.shape)
        row(name, shape, f"{k}/{s}", pytorch_step(x, k, s, dy), onednn_step(x, k, s, dy), args)
    print("AVE, ceil mode, forward")
    for name, (shape, k, s, p) in AVE_POOLS.items():
        theirs, ours = ave_steps(torch.randn(shape), k, s, p)
        row(name, shape, f"{k}/{s}", theirs, ours, args)
    return 0


def row(name, shape, geometry, theirs, ours, args) -> None:  # type: ignore[no-untyped-def]
    """Time both steps in alternating rounds and print one line."""
    ours(), theirs()  # warm-up
    mine, before = [], []
    for i in range(args.rounds):
        order = (theirs, ours) if i % 2 == 0 else (ours, theirs)
        times = {step: time_ms(step, args.iters) for step in order}
        before.append(times[theirs])
        mine.append(times[ours])
    ratio = statistics.median(a / b for a, b in zip(before, mine))
    print(f"{name:<23}{'x'.join(map(str, shape)):>20}{geometry:>5}"
          f"{statistics.median(before):>12.2f}{statistics.median(mine):>11.2f}"
          f"{ratio:>7.2f}x", flush=True)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
