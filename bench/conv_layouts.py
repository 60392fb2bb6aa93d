"""CPU convolution, NCHW vs channels-last: forward+backward time of one layer, side by side.

Why: on CPU PyTorch hands an NCHW convolution to oneDNN, which reorders the input, the
output and their gradients into blocks of 16 channels (8 on AVX2), padding a channel count
that is not a multiple of the block, and back; on channels-last (NHWC) tensors oneDNN runs
its brgemm kernels on the memory as it is. The engine's blobs are NCHW (Caffe's layout),
so channels-last costs a transpose in and out of each call. This bench times both ways for
a grid of channel counts (input 12×12, 5×5 kernel, pad 2, batch 64; --spatial for others):
NCHW is torch.convolution + convolution_backward on the blobs' tensors; channels-last
is the same with the input, weight and output gradient transposed to NHWC first and the
output and input gradient transposed back, as caffe/layers/_base_conv.py does. Rounds
alternate the two; the ratio (NCHW ms / channels-last ms, > 1: channels-last is faster) is
the median over neighbouring pairs of rounds, as in bench/engine_vs_torch.py.

    .venv/bin/python bench/conv_layouts.py [--inputs 3,8,16,20,24,32,48,64,96]
        [--outputs 20,32,50,64,96] [--spatial 12] [--batch 64] [--rounds 7] [--iters 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

CL = torch.channels_last


def layer_step(x, w, b, dy, channels_last: bool) -> None:
    if channels_last:
        x, w, dy = (t.contiguous(memory_format=CL) for t in (x, w, dy))
    torch.convolution(x, w, b, [1, 1], [2, 2], [1, 1], False, [0, 0], 1).contiguous()
    dx, dw, _ = torch.ops.aten.convolution_backward(
        dy, x, w, [w.shape[0]], [1, 1], [2, 2], [1, 1], False, [0, 0], 1, [True, True, True]
    )
    dx.contiguous()
    dw.contiguous()


def time_ms(step, iters: int) -> float:
    start = time.perf_counter()
    for _ in range(iters):
        step()
    return (time.perf_counter() - start) * 1000 / iters


def compare(c_in: int, c_out: int, spatial: int, batch: int, rounds: int, iters: int):
    x = torch.randn(batch, c_in, spatial, spatial)
    w = torch.randn(c_out, c_in, 5, 5)
    b = torch.randn(c_out)
    dy = torch.randn(batch, c_out, spatial, spatial)
    nchw, nhwc = (lambda cl=cl: layer_step(x, w, b, dy, cl) for cl in (False, True))
    nchw(), nhwc()  # warm-up: oneDNN builds its primitives
    first, second = [], []
    for i in range(rounds):
        order = (nchw, nhwc) if i % 2 == 0 else (nhwc, nchw)
        times = {step: time_ms(step, iters) for step in order}
        first.append(times[nchw])
        second.append(times[nhwc])
    ratio = statistics.median(a / b for a, b in zip(first, second))
    return statistics.median(first), statistics.median(second), ratio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--inputs", default="3,8,16,20,24,32,48,64,96")
    parser.add_argument("--outputs", default="20,32,50,64,96")
    parser.add_argument("--spatial", type=int, default=12)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iters", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; batch {args.batch}, "
          f"{args.spatial}x{args.spatial}, 5x5 kernel, pad 2")  # fmt: skip
    print(f"{'in':>4}{'out':>5}{'nchw ms':>10}{'nhwc ms':>10}{'nchw/nhwc':>11}")
    for c_in in (int(v) for v in args.inputs.split(",")):
        for c_out in (int(v) for v in args.outputs.split(",")):
            a, b, ratio = compare(c_in, c_out, args.spatial, args.batch, args.rounds, args.iters)
            print(f"{c_in:>4}{c_out:>5}{a:>10.2f}{b:>10.2f}{ratio:>10.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
