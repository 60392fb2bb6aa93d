"""Peak memory of training: the engine vs the same model in torch.nn, each in a fresh process.

The engine trains models/<model>/train_val_dummy.prototxt (DummyData: gaussian images,
constant labels) at the given batch with Caffe's SGD (momentum 0.9, weight_decay 5e-4, the
prototxt's lr_mult/decay_mult); torch.nn trains the same layers (bench/engine_vs_torch.py's
builder) with torch.optim.SGD over the same parameter groups (weights lr×1 decay×1, biases
lr×2 decay×0), cross-entropy, a fresh gaussian batch per iteration. Each side runs in its own
subprocess, so that neither inherits the other's heap; a process's peak is the kernel's
high-water mark of its RSS (VmHWM), reset once the model is built, so that building and
training are two peaks. Ratio = engine training peak / torch training peak (≤ 1.10: the
target of issue 11, point 5), and the same for the build peaks (≤ 1.20: issue 24, point 4);
with --repeat, the median of each side's peaks.

Where the memory goes (MiB), measured in each child after its last iteration:
  base        RSS after importing torch (and caffe) and one tiny op, before the model
  params      weights and their gradients (engine: the flat data and diff buffers)
  history     the solver's momentum (engine: history buffers; torch: momentum_buffer)
  data        engine: the data of every blob (each memory once: in-place and split tops
              share), the input included; torch: the tensors autograd saved in the last
              forward (parameters excluded), the input and the output included
  diffs       engine: the diff of every blob that has one; torch: none is kept (the
              gradients of activations live only during backward)
  layer state engine: tensors layers keep from forward for backward (pooling's argmax,
              dropout masks, private input copies; not oneDNN's opaque pooling outputs,
              which fall under transient); torch: inside "data"
  transient   peak − all of the above: kernels' outputs and workspaces, gradients in
              flight, and the allocator's free-but-kept memory

    .venv/bin/python bench/peak_memory.py [--model vgg19] [--batch 8] [--iters 3] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = 1.10
BUILD_TARGET = 1.20  # issue 24: building the model, before any training
PARTS = ("base", "params", "history", "data", "diffs", "layer state")


def vm_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        return int(re.search(rf"{field}:\s+(\d+)", status.read()).group(1))


def reset_peak() -> None:
    """Make VmHWM the current RSS (Linux: clear_refs 5), so the next peak is a phase's own."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def storages(tensors) -> dict[int, int]:
    """{data pointer: bytes} of the distinct storages behind `tensors`."""
    return {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}


# ----- the engine's child ------------------------------------------------------------------
def engine_child(model: str, batch: int, iters: int) -> dict:
    os.environ.setdefault("GLOG_minloglevel", "2")
    import torch

    import caffe
    from caffe.formats.proto_io import read_net_param
    from caffe.proto import caffe_pb2

    torch.ones(4).add_(1)
    base = vm_kib("VmRSS") << 10
    net_param = read_net_param(os.path.join(ROOT, "models", model, "train_val_dummy.prototxt"))
    for shape in net_param.layer[0].dummy_data_param.shape:
        shape.dim[0] = batch
    solver_param = caffe_pb2.SolverParameter(
        net_param=net_param, base_lr=0.001, lr_policy="fixed", momentum=0.9,
        weight_decay=0.0005, max_iter=iters, display=0, snapshot_after_train=False,
        solver_mode=caffe_pb2.SolverParameter.CPU, random_seed=1,
    )  # fmt: skip
    solver = caffe.SGDSolver(solver_param)
    build_peak = vm_kib("VmHWM") << 10
    reset_peak()
    solver.step(iters)
    peak = vm_kib("VmHWM") << 10
    net = solver.net
    report = net.memory_report()
    # Blob and parameter memory, so that layer state counts only what layers hold besides.
    held = storages([net.param_data, net.param_diff])
    for blob in net.blobs.values():
        held.update(storages(half.device() for half in blob.memory() if half is not None))
    state = {
        ptr: size
        for layer in net.layers
        for ptr, size in storages(layer_tensors(layer)).items()
        if ptr not in held
    }
    return {
        "base": base, "build peak": build_peak, "peak": peak, "params": report["params"],
        "history": sum(b.nbytes for b in solver.history_buffers), "data": report["data"],
        "diffs": report["diff"], "layer state": sum(state.values()),
    }  # fmt: skip


def layer_tensors(layer) -> list:
    """Tensors a layer holds in its attributes (one level into tuples and lists)."""
    import torch

    found = []
    for value in vars(layer).values():
        items = value if isinstance(value, tuple | list) else (value,)
        found += [v for v in items if isinstance(v, torch.Tensor)]
    return found


# ----- the torch.nn child ------------------------------------------------------------------
def torch_child(model: str, batch: int, iters: int) -> dict:
    import torch
    from torch import nn

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from engine_vs_torch import MODELS

    torch.ones(4).add_(1)
    base = vm_kib("VmRSS") << 10
    builder, _, shape, _ = MODELS[model]
    torch.manual_seed(1)
    module = builder().train()
    weights = [p for name, p in module.named_parameters() if name.endswith("weight")]
    biases = [p for name, p in module.named_parameters() if name.endswith("bias")]
    lr = 0.001
    optimizer = torch.optim.SGD(
        [{"params": weights}, {"params": biases, "lr": 2 * lr, "weight_decay": 0.0}],
        lr=lr, momentum=0.9, weight_decay=0.0005,
    )  # fmt: skip
    labels = torch.zeros(batch, dtype=torch.long)
    build_peak = vm_kib("VmHWM") << 10
    reset_peak()
    params = list(module.parameters())
    param_ptrs = storages(params)
    saved: list = []

    def keep(t):
        if t.untyped_storage().data_ptr() not in param_ptrs:
            saved.append(t)
        return t

    for it in range(iters):
        optimizer.zero_grad(set_to_none=False)
        x = torch.randn(batch, *shape)
        last = it == iters - 1
        with torch.autograd.graph.saved_tensors_hooks(keep if last else (lambda t: t), lambda t: t):
            out = module(x)
        if last:
            data = sum(storages([*saved, x, out]).values())
        nn.functional.cross_entropy(out, labels).backward()
        optimizer.step()
    peak = vm_kib("VmHWM") << 10
    return {
        "base": base, "build peak": build_peak, "peak": peak,
        "params": sum(storages(params + [p.grad for p in params]).values()),
        "history": sum(storages(optimizer.state[p]["momentum_buffer"] for p in params).values()),
        "data": data, "diffs": 0, "layer state": 0,
    }  # fmt: skip


# ----- the parent --------------------------------------------------------------------------
def run_child(side: str, args: argparse.Namespace) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--child", side, "--model", args.model,
               "--batch", str(args.batch), "--iters", str(args.iters)]  # fmt: skip
    out = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="vgg19")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each side (median)")
    parser.add_argument("--child", choices=["engine", "torch"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child = engine_child if args.child == "engine" else torch_child
        print(json.dumps(child(args.model, args.batch, args.iters)))
        return 0
    runs: dict[str, list[dict]] = {"engine": [], "torch": []}
    for _ in range(args.repeat):  # alternating, so that machine load hits both
        for side, results in runs.items():
            results.append(run_child(side, args))
    print(f"{args.model}, batch {args.batch}, {args.iters} training iterations, CPU; MiB")
    print(f"{'':<14}{'engine':>10}{'torch':>10}")
    peaks = {side: statistics.median(r["peak"] for r in results) for side, results in runs.items()}
    last = {side: results[-1] for side, results in runs.items()}
    for result in last.values():
        result["transient"] = result["peak"] - sum(result[p] for p in PARTS)
    rows = [("peak (median)", peaks["engine"], peaks["torch"])]
    rows += [(p, last["engine"][p], last["torch"][p]) for p in (*PARTS, "transient", "build peak")]
    for label, ours, theirs in rows:
        print(f"{label:<14}{ours / 2**20:>10.0f}{theirs / 2**20:>10.0f}")
    if args.repeat > 1:
        for side, results in runs.items():
            print(f"{side} peaks: " + ", ".join(f"{r['peak'] / 2**20:.0f}" for r in results))
    ratio = peaks["engine"] / peaks["torch"]
    verdict = "met" if ratio <= TARGET else "MISSED"
    print(f"peak RSS engine/torch {ratio:.2f}x (target <= {TARGET:.2f}x) -> {verdict}")
    builds = {side: statistics.median(r["build peak"] for r in results)
              for side, results in runs.items()}  # fmt: skip
    ratio = builds["engine"] / builds["torch"]
    verdict = "met" if ratio <= BUILD_TARGET else "MISSED"
    print(f"build peak engine/torch {ratio:.2f}x (target <= {BUILD_TARGET:.2f}x) -> {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
