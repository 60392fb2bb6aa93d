"""How a compute profile is measured with the engine: the pieces that measure.py puts
together (`poseidon profile --model M -o P.json`).

The TRAIN net is built by caffe, optionally at another batch, and timed layer by layer with
the loop of `caffe time` (caffe/tools/layer_timing.py): `warmup` untimed iterations, then
`iterations` timed ones; each layer's forward and backward time is the median over them.
For every InnerProduct layer whose weight learns, the part of backward that
sufficient-factor broadcasting skips (the dW GEMM and the bias sum, on the layer's real
top diff and input) is timed too, and the rate of the rebuild GEMM at K·P rows for
P = 1, 2, 4 ... 64 workers. FLOPs and bytes come from flops.py, sync shapes from
caffe.parallel.layout (the syncer's own derivation).

With copies > 1, that many processes measure at the same time (each with `threads`
threads) and their samples are pooled: the compute of one emulated node when that many
emulated nodes share this machine's cores.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import platform
import re
import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from poseidon.experiments.flops import layer_cost
from poseidon.experiments.netspec import set_batch
from poseidon.experiments.profile import LayerProfile, Profile, SfbTiming, SyncShape, rebuild_flops
from poseidon.experiments.resolve import model_label

# Workers the rebuild GEMM is probed for; rows = batch × P.
SFB_WORKERS = (1, 2, 4, 8, 16, 32, 64)
# Stop growing P once one rebuild GEMM would take longer than this (seconds, estimated as
# twice the last one): CPU profiles of VGG stay minutes, not hours.
GEMM_PROBE_LIMIT_S = 2.0


def build_net(path: str, batch: int | None = None) -> Any:
    """The TRAIN net of `path` (at `batch`), built quietly on the engine's current device."""
    import caffe
    from caffe.formats.proto_io import read_net_param

    param = read_net_param(path)
    param.state.phase = caffe.TRAIN
    if batch is not None:
        set_batch(param, batch, path)
    with quiet_engine():
        return caffe.Net(param)


@contextmanager
def quiet_engine() -> Iterator[None]:
    """Building a net logs every layer at INFO; the profile is the output here."""
    engine_log = logging.getLogger("caffe")
    level = engine_log.level
    engine_log.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        engine_log.setLevel(level)


def net_batch(net: Any) -> int:
    """The first axis of the first top of the first layer without bottoms."""
    for bottoms, tops in zip(net.bottom_vecs, net.top_vecs):
        if not bottoms and tops and tops[0].shape:
            return int(tops[0].shape[0])
    raise ValueError(f"net {net.name!r} has no data layer")


# ----- samples ------------------------------------------------------------------------------
@dataclass
class Samples:
    """Raw times of one or more measuring processes (seconds), pooled by `merge`."""

    forward: list[list[float]]  # per layer
    backward: list[list[float]]
    iteration: list[float]
    # InnerProduct layer index -> rows -> times of the rebuild GEMM + bias sum; the
    # smallest rows (P = 1, the layer's real top diff and input) is its weight_grad_s.
    gemm: dict[int, dict[int, list[float]]] = field(default_factory=dict)
    # Layer index -> times of the solver update of the parameters it owns.
    update: dict[int, list[float]] = field(default_factory=dict)
    # A CPU's host work per iteration, one sample per round (profile_host.py).
    host: list[float] = field(default_factory=list)

    def merge(self, other: Samples) -> None:
        for mine, theirs in zip(self.forward + self.backward, other.forward + other.backward):
            mine.extend(theirs)
        self.iteration.extend(other.iteration)
        self.host.extend(other.host)
        for index, times in other.update.items():
            self.update.setdefault(index, []).extend(times)
        for index, by_rows in other.gemm.items():
            for rows, times in by_rows.items():
                self.gemm.setdefault(index, {}).setdefault(rows, []).extend(times)


def _timed(fn: Callable[[], None], iterations: int) -> list[float]:
    """One untimed call, then `iterations` timed ones (the Timer synchronises CUDA)."""
    from caffe.timer import Timer

    fn()
    timer, times = Timer(), []
    for _ in range(iterations):
        timer.start()
        fn()
        times.append(timer.seconds)
    return times


def _weight_grad_op(layer: Any, dy: Any, x: Any) -> Callable[[], None]:
    """What SFB takes out of this layer's backward (and what its rebuild puts back)."""

    def run() -> None:
        layer.accumulate_weight_gradient(dy, x)
        if layer.bias_term and layer.param_propagate_down[1]:
            layer.blobs[1].diff_tensor.add_(dy.sum(dim=0))

    return run


def _gemm_samples(net: Any, index: int, iterations: int) -> dict[int, list[float]]:
    layer = net.layers[index]
    dy = net.top_vecs[index][0].diff_tensor.reshape(layer.M, layer.num_output)
    x = net.bottom_vecs[index][0].data_tensor.reshape(layer.M, layer.K)
    samples: dict[int, list[float]] = {}
    for workers in SFB_WORKERS:
        rows_dy = dy if workers == 1 else dy.repeat(workers, 1)
        rows_x = x if workers == 1 else x.repeat(workers, 1)
        times = _timed(_weight_grad_op(layer, rows_dy, rows_x), iterations)
        samples[layer.M * workers] = times
        if 2 * statistics.median(times) > GEMM_PROBE_LIMIT_S:
            break
    return samples


# The experiment worker's solver (experiments/worker.py): SGD, momentum, L2 weight decay.
MOMENTUM, WEIGHT_DECAY, LEARNING_RATE = 0.9, 5e-4, 1e-4


def _update_op(blobs: list[Any]) -> Callable[[], None]:
    """SGDSolver.update_param (L2 decay, momentum) and Net.update for these blobs: what a
    layer's parameters cost the device each iteration besides backward."""
    import torch

    history = [torch.zeros_like(blob.data_tensor) for blob in blobs]

    def run() -> None:
        for blob, h in zip(blobs, history):
            blob.diff_tensor.add_(blob.data_tensor, alpha=WEIGHT_DECAY)
            h.mul_(MOMENTUM).add_(blob.diff_tensor, alpha=LEARNING_RATE)
            blob.diff_tensor.copy_(h)
            blob.data_tensor.sub_(blob.diff_tensor)

    return run


def update_samples(net: Any, iterations: int) -> dict[int, list[float]]:
    owned = {id(blob) for blob in net.learnable_params}
    samples = {}
    for index, layer in enumerate(net.layers):
        blobs = [blob for blob in layer.blobs if id(blob) in owned]
        if blobs:
            samples[index] = _timed(_update_op(blobs), iterations)
    return samples


def sfb_layers(net: Any) -> list[int]:
    """The synchronised InnerProduct layers whose weight learns: those SFB could serve."""
    from caffe.parallel.layout import sync_layout

    return [
        s.index
        for s in sync_layout(net)
        if net.layers[s.index].type == "InnerProduct"
        and net.layer_need_backward[s.index]
        and net.layers[s.index].param_propagate_down[:1] == [True]
    ]


def collect_samples(
    net: Any, iterations: int, warmup: int, ready: Callable[[], None] | None = None
) -> Samples:
    """Warm up, call `ready()` (copies start together there), then time. A CPU's host work
    is the caller's to add (`Samples.host`, profile_host.host_samples)."""
    from caffe.tools.layer_timing import time_layers

    time_layers(net, warmup)
    if ready is not None:
        ready()
    timed = time_layers(net, iterations)
    count = len(net.layers)
    samples = Samples(
        forward=[[t.forward_s[i] for t in timed] for i in range(count)],
        backward=[[t.backward_s[i] for t in timed] for i in range(count)],
        iteration=[t.iteration_s for t in timed],
    )
    # Right after a backward pass: every top diff and bottom datum is the one it used.
    for index in sfb_layers(net):
        samples.gemm[index] = _gemm_samples(net, index, iterations)
    samples.update = update_samples(net, iterations)  # last: it changes the weights
    return samples


# ----- the profile ----------------------------------------------------------------------------
def describe_layers(net: Any) -> list[LayerProfile]:
    """Every layer with what does not need a clock: FLOPs, bytes, blobs, sync shape."""
    from caffe.parallel.layout import sync_layout

    synced = {s.index: s for s in sync_layout(net)}
    lr_mults: dict[int, list[float]] = {}
    learnable_ids = net.learnable_param_ids
    for net_id, (layer_id, _) in enumerate(net.param_layer_indices):
        learnable = learnable_ids[net_id]
        lr_mults.setdefault(layer_id, []).append(float(net.params_lr[learnable]))
    layers = []
    for i, layer in enumerate(net.layers):
        cost = layer_cost(net, i)
        sync = None
        if i in synced:
            s = synced[i]
            sync = SyncShape(kind=s.shape.kind, m=s.shape.m, n=s.shape.n, rows=s.shape.rows,
                             floats=s.num_floats, late=s.late, start=s.start)  # fmt: skip
        layers.append(LayerProfile(
            name=net.layer_names[i], type=layer.type, forward_s=0.0, backward_s=0.0,
            flops_forward=cost.flops_forward, flops_backward=cost.flops_backward,
            bytes=cost.bytes, blobs=[int(b.count) for b in layer.blobs], sync=sync,
            lr_mults=lr_mults.get(i, []),
        ))  # fmt: skip
    return layers


def apply_samples(profile: Profile, samples: Samples) -> None:
    """Medians of the pooled samples into the profile's times."""
    for i, layer in enumerate(profile.layers):
        layer.forward_s = statistics.median(samples.forward[i])
        layer.backward_s = statistics.median(samples.backward[i])
        if i in samples.update:
            layer.update_s = statistics.median(samples.update[i])
    profile.iteration_s = statistics.median(samples.iteration)
    if samples.host:
        profile.host_s = host_seconds(samples.host)
    for index, by_rows in samples.gemm.items():
        layer = profile.layers[index]
        outputs, inputs = _ip_dims(layer)
        rates = {rows: rebuild_flops(outputs, inputs, rows) / statistics.median(times)
                 for rows, times in sorted(by_rows.items())}  # fmt: skip
        layer.sfb = SfbTiming(statistics.median(by_rows[min(by_rows)]), rates)


def host_seconds(samples: list[float]) -> float:
    """A profile's `host_s` from its rounds (profile_host.py, Note [host work]): the median,
    0 if the parts outweigh the step."""
    return max(0.0, statistics.median(samples)) if samples else 0.0


def _ip_dims(layer: LayerProfile) -> tuple[int, int]:
    """(outputs, inputs) of a synchronised InnerProduct (sfb_layers has only those)."""
    assert layer.sync is not None, layer.name
    return layer.sync.m, layer.sync.n


def device_info(kind: str) -> dict[str, Any]:
    import torch

    if kind == "cuda":
        name = torch.cuda.get_device_name(torch.cuda.current_device())
        return {"kind": "cuda", "name": name, "threads": None, "tag": gpu_tag(name)}
    return {"kind": "cpu", "name": cpu_name(), "threads": torch.get_num_threads(), "tag": "cpu"}


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def gpu_tag(name: str) -> str:
    """A short lowercase tag: "NVIDIA H200" -> "h200", "NVIDIA GeForce RTX 4090" -> "rtx4090"."""
    words = [w for w in re.split(r"[\s\-_]+", name.lower()) if w]
    words = [w for w in words if w not in ("nvidia", "geforce", "tesla", "quadro")] or ["gpu"]
    tag = words[0]
    if tag in ("rtx", "gtx", "titan") and len(words) > 1:
        tag += words[1]
    return re.sub(r"[^a-z0-9]", "", tag) or "gpu"


def software_info(kind: str) -> dict[str, Any]:
    import torch

    try:
        version = importlib.metadata.version("poseidon-caffe")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    info: dict[str, Any] = {"poseidon": version, "torch": torch.__version__,
                            "python": platform.python_version()}  # fmt: skip
    if kind == "cuda":
        info["cuda"] = torch.version.cuda
        info["cudnn"] = torch.backends.cudnn.version()
        # TF32 or full FP32 changes a convolution's time 2-3x (CAFFE_ALLOW_TF32; caffe/common.py).
        info["tf32"] = bool(torch.backends.cudnn.allow_tf32)
    return info


def choose_device(device: str) -> None:
    import torch

    import caffe

    if device == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("no CUDA device (--device cuda); measure with --device cpu")
        caffe.set_mode_gpu()
    elif device == "cpu":
        caffe.set_mode_cpu()
    else:
        raise ValueError(f"device {device!r}: want cpu or cuda")


def skeleton(net: Any, prototxt_path: str, device: str) -> Profile:
    """The profile of `net` before any time is in it (called where the net was built, so
    that device["threads"] is that process's)."""
    return Profile(
        model=model_label(prototxt_path),
        net=_display_path(prototxt_path),
        batch=net_batch(net),
        device=device_info(device),
        software=software_info(device),
        method="measured",
        layers=describe_layers(net),
        iteration_s=0.0,
    )


def _display_path(path: str) -> str:
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative
