"""Engine vs plain PyTorch: forward+backward of the same network, side by side, one run.

For each model the engine builds models/<name>/deploy.prototxt (final Softmax replaced
by SoftmaxWithLoss on a label input), the same network is written directly in torch.nn
below, and the engine's weights are copied in. Before timing, the bench checks that
both compute the same loss and gradients (TEST phase: dropout off). Timing alternates
engine and torch rounds of --iters iterations, engine first in odd rounds and torch first in
even ones; reported: median ms per forward+backward of each, and the speed ratio =
torch_ms / engine_ms of each pair of neighbouring rounds, median over the pairs (>= 1 means
the engine is as fast as plain PyTorch or faster). On a shared machine the load drifts
between seconds; a pair of neighbouring rounds sees the same load, which the ratio of the
two medians does not.

    .venv/bin/python bench/engine_vs_torch.py [--device cpu|cuda] [--rounds 15] [--iters 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch
from torch import nn

os.environ.setdefault("GLOG_minloglevel", "2")
import caffe
from caffe.formats.proto_io import read_net_param
from caffe.proto import caffe_pb2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def lenet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 20, 5), nn.MaxPool2d(2, 2, ceil_mode=True),
        nn.Conv2d(20, 50, 5), nn.MaxPool2d(2, 2, ceil_mode=True),
        nn.Flatten(), nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10),
    )  # fmt: skip


def cifar10_quick() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 5, padding=2), nn.MaxPool2d(3, 2, ceil_mode=True), nn.ReLU(),
        nn.Conv2d(32, 32, 5, padding=2), nn.ReLU(), nn.AvgPool2d(3, 2, ceil_mode=True),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.AvgPool2d(3, 2, ceil_mode=True),
        nn.Flatten(), nn.Linear(1024, 64), nn.Linear(64, 10),
    )  # fmt: skip


def alexnet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 96, 11, stride=4), nn.ReLU(), nn.LocalResponseNorm(5, 1e-4, 0.75, 1.0),
        nn.MaxPool2d(3, 2, ceil_mode=True),
        nn.Conv2d(96, 256, 5, padding=2, groups=2), nn.ReLU(),
        nn.LocalResponseNorm(5, 1e-4, 0.75, 1.0), nn.MaxPool2d(3, 2, ceil_mode=True),
        nn.Conv2d(256, 384, 3, padding=1), nn.ReLU(),
        nn.Conv2d(384, 384, 3, padding=1, groups=2), nn.ReLU(),
        nn.Conv2d(384, 256, 3, padding=1, groups=2), nn.ReLU(),
        nn.MaxPool2d(3, 2, ceil_mode=True), nn.Flatten(),
        nn.Linear(9216, 4096), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(0.5), nn.Linear(4096, 1000),
    )  # fmt: skip


def vgg19(classes: int = 1000) -> nn.Module:
    layers: list[nn.Module] = []
    channels = 3
    for width, convs in ((64, 2), (128, 2), (256, 4), (512, 4), (512, 4)):
        for _ in range(convs):
            layers += [nn.Conv2d(channels, width, 3, padding=1), nn.ReLU()]
            channels = width
        layers.append(nn.MaxPool2d(2, 2, ceil_mode=True))
    layers += [
        nn.Flatten(), nn.Linear(25088, 4096), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(0.5), nn.Linear(4096, classes),
    ]  # fmt: skip
    return nn.Sequential(*layers)


def vgg19_22k() -> nn.Module:
    """The paper's VGG19-22K: VGG19 classifying ImageNet's 21,841 classes."""
    return vgg19(21841)


# model -> (torch.nn builder, batch size, input shape without batch, classes)
MODELS = {
    "lenet": (lenet, 64, (1, 28, 28), 10),
    "cifar10_quick": (cifar10_quick, 100, (3, 32, 32), 10),
    "alexnet": (alexnet, 8, (3, 227, 227), 1000),
    "vgg19": (vgg19, 32, (3, 224, 224), 1000),
    "vgg19_22k": (vgg19_22k, 32, (3, 224, 224), 21841),
}
DEFAULT_MODELS = {"cpu": "lenet,cifar10_quick,alexnet", "cuda": "lenet,cifar10_quick,alexnet,vgg19"}


def engine_net(name: str, batch: int, phase: int) -> caffe.Net:
    param = read_net_param(os.path.join(ROOT, "models", name, "deploy.prototxt"))
    data = param.layer[0]
    data.input_param.shape[0].dim[0] = batch
    label = caffe_pb2.LayerParameter(name="label", type="Input", top=["label"])
    label.input_param.shape.add().dim.append(batch)
    param.layer.insert(1, label)
    softmax = param.layer[-1]
    assert softmax.type == "Softmax", softmax.type
    softmax.type = "SoftmaxWithLoss"
    softmax.bottom.append("label")
    del softmax.top[:]
    softmax.top.append("loss")
    param.state.phase = phase
    return caffe.Net(param)


def copy_weights(net: caffe.Net, model: nn.Module) -> None:
    modules = [m for m in model.modules() if isinstance(m, nn.Conv2d | nn.Linear)]
    blobs = [blobs for blobs in net.params.values()]
    assert len(modules) == len(blobs), (len(modules), len(blobs))
    with torch.no_grad():
        for module, (weight, bias) in zip(modules, blobs):
            module.weight.copy_(weight.data_tensor.view_as(module.weight))
            module.bias.copy_(bias.data_tensor)


def check_same(name: str, device: torch.device) -> None:
    builder, _, shape, classes = MODELS[name]
    batch = 4
    net = engine_net(name, batch, caffe.TEST)
    model = builder().to(device).eval()
    copy_weights(net, model)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, *shape)).astype(np.float32)
    y = rng.integers(0, classes, batch).astype(np.float32)
    loss = float(net.forward(data=x, label=y)["loss"])
    net.clear_param_diffs()
    net.backward()
    ref = nn.functional.cross_entropy(
        model(torch.from_numpy(x).to(device)), torch.from_numpy(y).long().to(device)
    )
    model.zero_grad()
    ref.backward()
    assert abs(loss - ref.item()) <= 1e-4 * max(1.0, abs(ref.item())), (name, loss, ref.item())
    first = next(m for m in model.modules() if isinstance(m, nn.Conv2d | nn.Linear))
    ours = next(iter(net.params.values()))[0].diff
    np.testing.assert_allclose(
        ours.reshape(first.weight.shape), first.weight.grad.cpu().numpy(), rtol=2e-3, atol=1e-5
    )


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_engine(net: caffe.Net, iters: int, device: torch.device) -> float:
    sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        net.clear_param_diffs()
        net.forward_backward()
    sync(device)
    return (time.perf_counter() - start) * 1000 / iters


def time_torch(model, x, y, iters: int, device: torch.device) -> float:
    sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        model.zero_grad(set_to_none=False)
        nn.functional.cross_entropy(model(x), y).backward()
    sync(device)
    return (time.perf_counter() - start) * 1000 / iters


def training_pair(name: str, batch: int, device: torch.device) -> tuple:
    """(engine net, torch.nn model, input, labels): the same TRAIN net, weights and batch
    on both sides, the batch already in the engine's input blobs."""
    builder, _, shape, classes = MODELS[name]
    net = engine_net(name, batch, caffe.TRAIN)
    model = builder().to(device).train()
    copy_weights(net, model)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((batch, *shape)).astype(np.float32)
    y = rng.integers(0, classes, batch).astype(np.float32)
    net.blobs["data"].data[...] = x
    net.blobs["label"].data[...] = y
    return net, model, torch.from_numpy(x).to(device), torch.from_numpy(y).long().to(device)


def bench(name: str, device: torch.device, rounds: int, iters: int, batch: int) -> tuple:
    batch = batch or MODELS[name][1]
    net, model, tx, ty = training_pair(name, batch, device)
    time_engine(net, 1, device)  # warm-up both
    time_torch(model, tx, ty, 1, device)
    ours, theirs = [], []
    for i in range(rounds):
        if i % 2:
            theirs.append(time_torch(model, tx, ty, iters, device))
        ours.append(time_engine(net, iters, device))
        if not i % 2:
            theirs.append(time_torch(model, tx, ty, iters, device))
    ratio = statistics.median(t / e for t, e in zip(theirs, ours))
    return batch, statistics.median(ours), statistics.median(theirs), ratio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--batch", type=int, default=0, help="override every model's batch")
    parser.add_argument("--models", default="", help="comma list; default per device")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda":
        caffe.set_mode_gpu()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {device}")
    print(f"{'model':<15}{'batch':>6}{'engine ms':>12}{'torch ms':>12}{'speed vs torch':>16}")
    worst = float("inf")
    for name in (args.models or DEFAULT_MODELS[device.type]).split(","):
        check_same(name, device)
        batch, ours, theirs, ratio = bench(name, device, args.rounds, args.iters, args.batch)
        worst = min(worst, ratio)
        print(f"{name:<15}{batch:>6}{ours:>12.2f}{theirs:>12.2f}{ratio:>15.2f}x")
    print(f"worst ratio {worst:.2f}x (target >= 1.00x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
