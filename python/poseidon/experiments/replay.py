"""Compute replay: the profiled net, with every layer spending its measured time instead of
computing, in front of the real synchronisation path.

`replay_net_param(net_param, profile, byte_scale)` turns the TRAIN net of a prototxt into a
net of the same layers, names, bottoms, tops, parameter specs and loss weights, each a
`ReplayLayer` (a pycaffe Python layer, so the engine builds it like any other). The Net,
the Solver, `caffe/parallel/syncer.py`'s PoseidonSync (WFBP hooks, the HybComm plan, the C++ KV
store and SFB all-gather) and the DDP-style all-reduce run unchanged on top: only the
arithmetic is gone. docs/design.md §4: simulated compute, real communication.

What a ReplayLayer does:
- forward and backward sleep the profile's time on the process's device clock
  (poseidon/experiments/clock.py), dilated, forward with its share of a CPU profile's host
  work (`host_s` / layers: profile_host.py, Note [host work]); tops are 1-element blobs;
- its learnable blobs have the real sizes divided by the byte scale s (rounded up), so the
  PS moves 1/s of the bytes over links slowed by s (transfer times are kept); the plan is
  decided on the real shapes (`comm_shape` reports the profile's, not the blobs');
- backward adds a rank-dependent value to one element of each parameter diff, so that a
  sync that failed to average would leave the workers' weights different (the experiment
  compares checksums);
- the solver (`ReplaySolver`) spends each layer's profiled update time instead of
  computing the update; the syncer's own `data -= diff` of a deferred update stays real;
- an InnerProduct synchronised by SFB hands the sink factors of the real row count and
  1/s of the real widths, skips the profiled dW share of its backward (what the real layer
  skips), and charges the rebuild GEMM at the profile's rate for K·P1 rows: the rebuild
  grows with the cluster, as it does on a real device;
- lossy schemes (the job's POSEIDON_COMPRESSION): each layer declares its byte scale, so the
  plan cuts PowerSGD's parts from a matrix of 1/s of the real rows and columns (plan.h,
  Note [byte-scaled layers]) and the stand-in really compresses it, error feedback and
  all; each encoding and the decode spend the plan's estimate of that step on the device
  clock (`replay_compute`). BF16 layers move 2-byte floats of 1/s of the bytes. When the
  coordinator plans by time, the layers declare the profile's backward and SFB timings
  (`profiled_costs`, the predictor's), not this machine's on 1/s of the bytes.
"""

from __future__ import annotations

import json
import math
from typing import Any

import torch

from caffe.common import solver_rank
from caffe.insert_splits import insert_splits
from caffe.layer import Layer, layer_class
from caffe.net_filter import filter_net
from caffe.proto import caffe_pb2
from caffe.solvers.sgd import SGDSolver
from caffe.training_hooks import HookSlot
from poseidon.experiments.clock import device_clock
from poseidon.experiments.netspec import data_batch
from poseidon.experiments.profile import Profile, ProfileError, SfbTiming
from poseidon.experiments.profile_layout import profiled_costs
from poseidon.sync.layout import CommShape

MODULE = "poseidon.experiments.replay"


def train_net(net_param: caffe_pb2.NetParameter) -> caffe_pb2.NetParameter:
    """The TRAIN net as the engine builds it: state rules applied, Split layers inserted."""
    state = caffe_pb2.NetState()
    state.CopyFrom(net_param.state)
    state.phase = caffe_pb2.TRAIN
    param = caffe_pb2.NetParameter()
    param.CopyFrom(net_param)
    param.state.CopyFrom(state)
    return insert_splits(filter_net(param, state))


def _declare_lr_mults(layer: caffe_pb2.LayerParameter, lr_mults: list[float]) -> None:
    """Each blob's effective lr_mult, explicit: a layer type that pins its own at setup (a
    BatchNorm's statistics) is a ReplayLayer here and pins nothing."""
    while len(layer.param) < len(lr_mults):
        layer.param.add()
    for spec, lr_mult in zip(layer.param, lr_mults):
        spec.lr_mult = lr_mult


def scaled(count: int, byte_scale: int) -> int:
    return math.ceil(count / byte_scale) if count else 0


def replay_net_param(
    net_param: caffe_pb2.NetParameter, profile: Profile, byte_scale: int, net_label: str
) -> caffe_pb2.NetParameter:
    """The replay twin of `net_param`'s TRAIN net (ProfileError if the profile does not
    describe it)."""
    if byte_scale < 1:
        raise ValueError(f"byte scale {byte_scale} (want >= 1)")
    source = train_net(net_param)
    names = [layer.name for layer in source.layer]
    profile.check_matches(names, data_batch(source, net_label), net_label)
    out = caffe_pb2.NetParameter()
    out.name = f"{source.name}_replay" if source.name else "replay"
    out.state.CopyFrom(source.state)
    out.force_backward = source.force_backward
    for layer, timing in zip(source.layer, profile.layers):
        if timing.type != layer.type:
            raise ProfileError(
                f"profile {profile.label()}: layer {layer.name!r} is "
                f"{timing.type} there, {layer.type} in {net_label}"
            )
        replay = out.layer.add()
        replay.name = layer.name
        replay.type = "Python"
        replay.bottom.extend(layer.bottom)
        replay.top.extend(layer.top)
        replay.param.extend(layer.param)
        _declare_lr_mults(replay, timing.lr_mults)
        replay.loss_weight.extend(layer.loss_weight)
        replay.propagate_down.extend(layer.propagate_down)
        if layer.HasField("phase"):
            replay.phase = layer.phase
        spec = {
            "type": layer.type,
            "forward_s": timing.forward_s,
            "backward_s": timing.backward_s,
            "update_s": timing.update_s,
            # A CPU's host work (Note [host work]): a share with each forward, as predicted.
            "host_s": profile.host_s / len(profile.layers),
            "blobs": [scaled(count, byte_scale) for count in timing.blobs],
            "byte_scale": byte_scale,
        }
        if timing.sync is not None:
            spec["shape"] = [timing.sync.kind, timing.sync.m, timing.sync.n, timing.sync.rows]
        if timing.sfb is not None:
            spec["sfb"] = {
                "weight_grad_s": timing.sfb.weight_grad_s,
                "rates": {str(k): v for k, v in timing.sfb.gemm_flops_per_s.items()},
            }
        replay.python_param.module = MODULE
        replay.python_param.layer = "ReplayLayer"
        replay.python_param.param_str = json.dumps(spec)
    return out


class ReplayLayer(Layer):
    """One profiled layer, replayed (see the module's docstring)."""

    # Set by caffe/parallel/syncer.py for SFB layers, as InnerProduct's (caffe/training_hooks.py).
    sufficient_factor_sink: HookSlot = HookSlot()

    def __init__(self, layer_param: caffe_pb2.LayerParameter | None = None) -> None:
        super().__init__(layer_param)
        spec = json.loads(self.layer_param.python_param.param_str)
        self.replayed_type: str = spec["type"]
        self.forward_s: float = spec["forward_s"]
        self.backward_s: float = spec["backward_s"]
        self.update_s: float = spec.get("update_s", 0.0)
        self.host_s: float = spec.get("host_s", 0.0)
        self.blob_sizes: list[int] = spec["blobs"]
        self.byte_scale: int = spec["byte_scale"]
        shape = spec.get("shape")
        self.shape = CommShape(*shape) if shape else None
        sfb = spec.get("sfb")
        self.sfb = None
        if sfb:
            rates = {int(k): v for k, v in sfb["rates"].items()}
            self.sfb = SfbTiming(sfb["weight_grad_s"], rates)
        # Loss layers keep their default loss weight; anonymous tops stay possible.
        original = layer_class(self.replayed_type)
        self.is_loss = original.is_loss
        self.auto_top_blobs = original.auto_top_blobs
        self.min_top, self.exact_num_top = original.min_top, original.exact_num_top
        self._factors: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def type(self) -> str:
        return self.replayed_type

    # ----- the comm core's view: the real shapes -------------------------------------------
    def comm_shape(self, bottom) -> tuple[str, int, int, int]:
        if self.shape is None:
            raise self.error(
                "the profile has no sync shape for this layer, but the net synchronises it "
                "(profile and net disagree on its lr_mult)"
            )
        return (self.shape.kind, self.shape.m, self.shape.n, self.shape.rows)

    def factor_widths(self) -> tuple[int, int]:
        outputs, inputs = self._fc_dims()
        return scaled(outputs, self.byte_scale), scaled(inputs, self.byte_scale)

    def _fc_dims(self) -> tuple[int, int]:
        if self.shape is None or self.shape.kind != "FC":
            raise self.error("sufficient factors asked of a layer that is not an FC layer")
        return self.shape.m, self.shape.n

    # ----- the plan by time, and the codecs' compute -----------------------------------------
    def profiled_costs(self, spec: Any, workers: int) -> Any:
        """What the replayed device's layer declares to the coordinator when it plans by time:
        the profile's backward and SFB timings, as the predictor charges them."""
        rows = self.shape.rows if self.shape is not None else 0
        return profiled_costs(self.backward_s, self.sfb, spec, rows, workers)

    def replay_compute(self, seconds: float) -> None:
        """A codec step of this layer's lossy scheme (PowerSGD's encodings and decode),
        spent on the device clock at the plan's estimate: the stand-in computes on 1/s of
        the bytes, the replayed device on all of them."""
        device_clock().spend(seconds)

    # ----- the layer sequence ----------------------------------------------------------------
    def setup(self, bottom, top):
        for count in self.blob_sizes:
            self.blobs.add_blob(count).data_tensor.fill_(0.01)

    def reshape(self, bottom, top):
        for blob in top:
            blob.reshape([1])

    def forward(self, bottom, top):
        device_clock().spend(self.forward_s + self.host_s)

    def backward(self, top, propagate_down, bottom):
        sink = self.sufficient_factor_sink
        if sink is None:
            device_clock().spend(self.backward_s)
            # One sentinel per blob: the bytes move whatever they hold, and the sentinels
            # tell whether the workers' averaged gradients agree.
            gradient = float(solver_rank() + 1)
            for blob, needed in zip(self.blobs, self.param_propagate_down):
                if needed and blob.count:
                    blob.diff_tensor.view(-1)[:1].add_(gradient)
            return
        # SFB: the dW GEMM and bias sum are skipped; the rebuild charges them P1 times over.
        skipped = self.sfb.weight_grad_s if self.sfb is not None else 0.0
        device_clock().spend(max(0.0, self.backward_s - skipped))
        sink(*self._sufficient_factors())

    def _sufficient_factors(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._factors is None:
            rows = self.shape.rows if self.shape is not None else 1
            dy_width, x_width = self.factor_widths()
            value = float(solver_rank() + 1)
            self._factors = (
                torch.full((rows, dy_width), value, device=self.device),
                torch.full((rows, x_width), value, device=self.device),
            )
        return self._factors

    def add_factor_gradients(self, dy: torch.Tensor, x: torch.Tensor, scale: float) -> None:
        """Charge the rebuild GEMM for every worker's rows; leave the same diff everywhere."""
        outputs, inputs = self._fc_dims()
        rows = dy.shape[0]
        if self.sfb is None:
            raise self.error("the profile has no GEMM rate for the SFB rebuild of this layer")
        device_clock().spend(self.sfb.rebuild_s(outputs, inputs, rows))
        # Each worker's factors are filled with rank + 1, all workers with the same rows:
        # the mean is what every worker must end with, and it differs from any one worker's
        # own if the all-gather failed.
        per_worker = self.shape.rows if self.shape is not None else 1
        mean = scale * float(dy[:, 0].sum()) / max(1, per_worker)
        for blob, needed in zip(self.blobs, self.param_propagate_down):
            if needed and blob.count:
                blob.diff_tensor.view(-1)[:1].add_(mean)


class ReplaySolver(SGDSolver):
    """SGD whose update spends the profile's time instead of computing it: the replay trains
    no real kernels. Each learnable parameter is charged its layer's `update_s` in
    proportion to its size; Net.update (data -= diff, on byte-scaled blobs) stays, untimed:
    the profiled update_s holds it already."""

    check_nonfinite = False  # no real arithmetic: nothing diverges, and no check's time

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self._update_cost = _update_costs(self.net)
        # Net.update's data -= diff after the updates (the solver's own path, the all-reduce
        # baseline's) likewise: real, and inside the profiled update_s.
        update = self.net.update

        def untimed_update() -> None:
            with device_clock().untimed():
                update()

        self.net.update = untimed_update  # type: ignore[method-assign]

    def update_param(self, param_id: int, rate: float) -> None:
        device_clock().spend(self._update_cost[param_id])

    def subtract_diff(self, data: torch.Tensor, diff: torch.Tensor) -> None:
        """The deferred update's data -= diff stays real (the workers' checksums), but its
        time is inside the profiled update_s that update_param spent: not host work."""
        with device_clock().untimed():
            super().subtract_diff(data, diff)


def _update_costs(net) -> list[float]:  # type: ignore[no-untyped-def]
    """Seconds charged to each learnable parameter: its owner layer's update_s, split by
    blob size among the parameters that layer owns."""
    owner = [-1] * len(net.learnable_params)
    owners, learnable_ids = net.param_owners, net.learnable_param_ids
    for net_id, (layer_id, _) in enumerate(net.param_layer_indices):
        if owners[net_id] < 0:
            owner[learnable_ids[net_id]] = layer_id
    sizes: dict[int, int] = {}
    for param_id, layer_id in enumerate(owner):
        sizes[layer_id] = sizes.get(layer_id, 0) + net.learnable_params[param_id].count
    costs = []
    for param_id, layer_id in enumerate(owner):
        layer = net.layers[layer_id]
        share = net.learnable_params[param_id].count / max(1, sizes[layer_id])
        costs.append(getattr(layer, "update_s", 0.0) * share)
    return costs
