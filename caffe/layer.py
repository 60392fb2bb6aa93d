"""Layer base class and the registry of layer types.

A layer type registers with one decorator line, `@register_layer("InnerProduct")`;
an unknown type fails with the list of known ones. Subclasses fill the smallest
hooks, with pycaffe's Python-layer signatures:

    setup(bottom, top)                     once, after blob-count checks
    reshape(bottom, top)                   before every forward; sets top shapes
    forward(bottom, top)                   fills top data
    backward(top, propagate_down, bottom)  fills bottom diffs, accumulates param diffs

The base class owns the sequence and the checks (`run_setup`, `run_forward`,
`run_backward`): blob counts, loss weights, the loss of weighted tops.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

from caffe.blob import Blob
from caffe.common import compute_device
from caffe.errors import LayerError, NetError
from caffe.proto import caffe_pb2
from caffe.registry import Registry

_REGISTRY: Registry[type[Layer]] = Registry("layer", NetError)
L = TypeVar("L", bound="type[Layer]")


def register_layer(type_name: str) -> Callable[[L], L]:
    """Class decorator: make `type_name` (as written in prototxt) create this class."""
    return _REGISTRY.register(type_name)


def layer_type_list() -> list[str]:
    """Registered type names, sorted (pycaffe's caffe.layer_type_list())."""
    _load_builtin_layers()
    return _REGISTRY.names()


def layer_class(type_name: str) -> type[Layer]:
    """The class registered for `type_name`; an unknown name lists the known ones."""
    _load_builtin_layers()
    return _REGISTRY.lookup(type_name, f"layer type '{type_name}'")


def create_layer(param: caffe_pb2.LayerParameter, device: torch.device | None = None) -> Layer:
    """Instantiate the registered class for param.type; unknown types list the known ones."""
    _load_builtin_layers()
    cls = _REGISTRY.lookup(param.type, f"layer '{param.name}'")
    if hasattr(cls, "create"):
        return cls.create(param, device)
    return cls(param, device=device)


def _load_builtin_layers() -> None:
    import caffe.layers  # noqa: F401  (registers every built-in type on import)


class BlobVec(list):
    """A layer's learnable blobs; pycaffe's `layer.blobs`, with `add_blob(*shape)`."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self._device = device

    def add_blob(self, *shape: int) -> Blob:
        blob = Blob(shape, device=self._device)
        self.append(blob)
        return blob


class Layer:
    """Base of every layer. Class attributes state the blob-count contract (-1 = any)."""

    type_name = ""
    exact_num_bottom = -1
    min_bottom = -1
    max_bottom = -1
    exact_num_top = -1
    min_top = -1
    max_top = -1
    equal_num_bottom_top = False
    auto_top_blobs = False  # loss layers: a missing top is created anonymously
    is_loss = False  # default loss_weight 1 on top 0

    def __init__(
        self,
        layer_param: caffe_pb2.LayerParameter | None = None,
        device: torch.device | None = None,
    ) -> None:
        self.layer_param = layer_param if layer_param is not None else caffe_pb2.LayerParameter()
        self.device = device if device is not None else compute_device()
        self.blobs = BlobVec(self.device)
        self.phase = self.layer_param.phase
        self.loss_weights: list[float] = []
        self._loss_terms: list[tuple[int, float]] = []  # (top index, weight) of weighted tops
        # Set by the Net after setup: which params and bottoms need gradients.
        self.param_propagate_down: list[bool] = []
        self.bottom_need_backward: list[bool] = []
        self.need_backward = False
        if self.layer_param.blobs:
            self._blobs_from_param()

    def _blobs_from_param(self) -> None:
        """Blobs given inside the LayerParameter replace filler initialization (as Caffe)."""
        for proto in self.layer_param.blobs:
            if (
                proto.HasField("num")
                or proto.HasField("channels")
                or proto.HasField("height")
                or proto.HasField("width")
            ):
                shape = [proto.num, proto.channels, proto.height, proto.width]
            else:
                shape = list(proto.shape.dim)
            values = proto.double_data if len(proto.double_data) else proto.data
            blob = self.blobs.add_blob(*shape)
            if len(values) != blob.count:
                raise self.error(f"blob in the layer parameter has {len(values)} values for "
                                 f"shape {shape}")  # fmt: skip
            blob.data_tensor.copy_(torch.tensor(list(values), dtype=torch.float32).view(shape))
        del self.layer_param.blobs[:]

    # ----- identity -------------------------------------------------------------------
    @property
    def type(self) -> str:
        return self.type_name or self.layer_param.type

    @property
    def name(self) -> str:
        return self.layer_param.name

    def error(self, message: str) -> LayerError:
        """A LayerError naming this layer (raise the result)."""
        return LayerError(f"Layer '{self.name}' (type {self.type}): {message}")

    def image_shape(self, blob: Blob) -> list[int]:
        """`blob`'s shape, which must be (num, channels, height, width) (LRN, Pooling)."""
        shape = blob.shape
        if len(shape) != 4:
            raise self.error(
                f"Input must have 4 axes, corresponding to (num, channels, height, width); "
                f"bottom has shape {shape}"
            )
        return shape

    def allow_force_backward(self, bottom_index: int) -> bool:
        return True

    def comm_shape(self, bottom: Sequence[Blob]) -> tuple[str, int, int, int]:
        """How the communication cost model sees this layer's weight: (kind, m, n, rows) in
        the cost model's names (docs/paper.md §4) — kind "FC", "conv" or "other", an m×n
        weight and K = rows per pass. Here blob 0 as rows × the rest and the bottom's batch
        as K; Convolution and InnerProduct say more. A plain tuple, so that the engine
        needs nothing of the distributed side (caffe/parallel/layout.py reads it)."""
        shape = self.blobs[0].shape if self.blobs else [1]
        m = shape[0] if shape else 1
        n = max(1, self.blobs[0].count // max(1, m)) if self.blobs else 1
        rows = bottom[0].shape[0] if bottom and bottom[0].shape else 1
        return ("other", m, n, rows)

    # ----- what the layer computes, for cost estimates (poseidon/experiments/flops.py) -------
    def flops(
        self,
        bottom: Sequence[Blob],
        top: Sequence[Blob],
        bottom_need: Sequence[bool],
        param_need: Sequence[bool],
    ) -> tuple[float, float] | None:
        """FLOPs (a multiply-add counts 2) of one forward and of one backward over the
        whole batch at the blobs' current shapes, backward counting only the gradients
        asked for (`bottom_need[i]` for bottom i, `param_need[j]` for blob j). None (the
        default): a few operations per element, which an estimate takes by type."""
        return None

    def backward_reads_input(self) -> bool:
        """Whether backward reads the bottoms' data (memory traffic a cost estimate
        counts); False for layers whose gradient does not depend on their input."""
        return True

    def batch_wait_s(self) -> float | None:
        """Seconds the last forward waited for its batch, for a data layer that prefetches
        batches on a thread (the timeline's "data" lane); None for every other layer."""
        return None

    # ----- hooks for subclasses ---------------------------------------------------------
    def setup(self, bottom: Sequence[Blob], top: Sequence[Blob]) -> None:
        """Read parameters, create learnable blobs. Default: nothing to do."""

    def reshape(self, bottom: Sequence[Blob], top: Sequence[Blob]) -> None:
        raise NotImplementedError(f"{type(self).__name__}.reshape")

    def forward(self, bottom: Sequence[Blob], top: Sequence[Blob]) -> None:
        raise NotImplementedError(f"{type(self).__name__}.forward")

    def backward(
        self, top: Sequence[Blob], propagate_down: Sequence[bool], bottom: Sequence[Blob]
    ) -> None:
        """Default: a layer without gradients (data, accuracy...)."""

    # ----- the sequence (owned here) ----------------------------------------------------
    def run_setup(self, bottom: Sequence[Blob], top: Sequence[Blob]) -> None:
        self.check_blob_counts(bottom, top)
        self.setup(bottom, top)
        self.reshape(bottom, top)
        self._set_loss_weights(top)

    def run_forward(self, bottom: Sequence[Blob], top: Sequence[Blob]) -> torch.Tensor | None:
        """Reshape, forward, and return the weighted loss of this layer's tops (or None)."""
        self.reshape(bottom, top)
        self.forward(bottom, top)
        if not self._loss_terms:
            return None
        loss = None
        for top_index, weight in self._loss_terms:
            term = top[top_index].data_tensor.sum()
            if weight != 1:
                term = term * weight
            loss = term if loss is None else loss + term
        return loss

    def run_backward(
        self, top: Sequence[Blob], propagate_down: Sequence[bool], bottom: Sequence[Blob]
    ) -> None:
        self.backward(top, propagate_down, bottom)

    def check_blob_counts(self, bottom: Sequence[Blob], top: Sequence[Blob]) -> None:
        nb, nt = len(bottom), len(top)
        rules = [
            (self.exact_num_bottom >= 0 and nb != self.exact_num_bottom,
             f"takes {self.exact_num_bottom} bottom blob(s) as input, got {nb}"),
            (self.min_bottom >= 0 and nb < self.min_bottom,
             f"takes at least {self.min_bottom} bottom blob(s) as input, got {nb}"),
            (self.max_bottom >= 0 and nb > self.max_bottom,
             f"takes at most {self.max_bottom} bottom blob(s) as input, got {nb}"),
            (self.exact_num_top >= 0 and nt != self.exact_num_top,
             f"produces {self.exact_num_top} top blob(s) as output, got {nt}"),
            (self.min_top >= 0 and nt < self.min_top,
             f"produces at least {self.min_top} top blob(s) as output, got {nt}"),
            (self.max_top >= 0 and nt > self.max_top,
             f"produces at most {self.max_top} top blob(s) as output, got {nt}"),
            (self.equal_num_bottom_top and nb != nt,
             f"produces one top blob as output for each bottom blob input ({nb} vs {nt})"),
        ]  # fmt: skip
        for failed, message in rules:
            if failed:
                raise NetError(f"Layer '{self.name}' (type {self.type}) {message}")

    def _set_loss_weights(self, top: Sequence[Blob]) -> None:
        weights = list(self.layer_param.loss_weight)
        if weights and len(weights) != len(top):
            raise NetError(
                f"Layer '{self.name}': loss_weight must be unspecified or specified once per "
                f"top blob ({len(weights)} given for {len(top)} tops)"
            )
        if not weights and self.is_loss:
            weights = [1.0] + [0.0] * (len(top) - 1)
            # Caffe records the default in the layer's parameter (visible in saved models).
            self.layer_param.loss_weight.extend(weights)
        self.loss_weights = weights + [0.0] * (len(top) - len(weights))
        self._loss_terms = [(i, w) for i, w in enumerate(self.loss_weights) if w != 0]
        for blob, weight in zip(top, self.loss_weights):
            if weight != 0:
                # The weight lives in the top's diff: backward starts from it.
                blob.diff_tensor.fill_(weight)

    def loss(self, top_index: int) -> float:
        return self.loss_weights[top_index] if top_index < len(self.loss_weights) else 0.0


class AutogradLayer(Layer):
    """A layer whose backward is the exact gradient of `compute`, taken by torch.autograd.

    Forward records a small graph per layer (inputs detached at the layer boundary), so
    backward of layer l never touches layer l-1 and a layer's gradients are final the
    moment its backward returns - what wait-free backpropagation needs. The graph keeps its
    own outputs, so unlike Caffe's hand-written backwards it never reads a top that a later
    in-place layer overwrote. Subclasses write only `compute(bottoms, params) -> tops`
    (tensors) and `reshape`.
    """

    def compute(
        self, bottoms: list[torch.Tensor], params: list[torch.Tensor]
    ) -> list[torch.Tensor]:
        raise NotImplementedError(f"{type(self).__name__}.compute")

    def forward(self, bottom: Sequence[Blob], top: Sequence[Blob]) -> None:
        record = self.need_backward and torch.is_grad_enabled()
        xs = [b.data_tensor for b in bottom]
        ps = [b.data_tensor for b in self.blobs]
        if record:
            # The graph holds the bottoms' memory; an in-place top overwrites it: a copy then.
            xs = [
                (x.clone() if any(t is b for t in top) else x.detach())
                .requires_grad_(i < len(self.bottom_need_backward)
                                and self.bottom_need_backward[i])
                for i, (x, b) in enumerate(zip(xs, bottom))
            ]  # fmt: skip
            ps = [
                p.detach().requires_grad_(i < len(self.param_propagate_down)
                                          and self.param_propagate_down[i])
                for i, p in enumerate(ps)
            ]  # fmt: skip
            outs = self.compute(xs, ps)
            self._graph: tuple | None = (xs, ps, outs)
        else:
            with torch.no_grad():
                outs = self.compute(xs, ps)
            self._graph = None
        for blob, out in zip(top, outs):
            blob.set_data(out)

    def backward(
        self, top: Sequence[Blob], propagate_down: Sequence[bool], bottom: Sequence[Blob]
    ) -> None:
        graph = getattr(self, "_graph", None)
        if graph is None:
            raise self.error("backward called without a recorded forward pass")
        xs, ps, outs = graph
        self._graph = None
        wanted = [
            (b, x, False)
            for b, x, down in zip(bottom, xs, propagate_down)
            if down and x.requires_grad
        ]
        wanted += [(p, t, True) for p, t in zip(self.blobs, ps) if t.requires_grad]  # fmt: skip
        live = [(o, t.diff_tensor) for o, t in zip(outs, top) if o.requires_grad]
        if not wanted or not live:
            return
        grads = torch.autograd.grad(
            [o for o, _ in live], [t for _, t, _ in wanted], [g for _, g in live], allow_unused=True
        )
        for (blob, tensor, is_param), grad in zip(wanted, grads):
            if grad is None:
                grad = torch.zeros_like(tensor)
            if is_param:
                blob.diff_tensor.add_(grad)  # parameter gradients accumulate
            else:
                blob.set_diff(grad)  # bottom gradients overwrite
