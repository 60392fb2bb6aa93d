"""What one layer of a built caffe.Net computes and moves per pass: FLOPs and bytes.

The derived GPU profiles (profile_derive.py) split a published whole-net time over the
layers by a roofline estimate, max(FLOPs / peak rate, bytes / memory bandwidth), so both
numbers matter: FLOPs bound the convolutions and the large InnerProducts, bytes bound the
element-wise layers.

FLOPs: a multiply-add counts 2.
- Convolution: 2 · (output elements) · (Cin/group) · kernel volume, plus one add per
  output element for the bias. Deconvolution is the same GEMM seen from its input:
  2 · (input elements) · (Cout/group) · kernel volume. Backward is a dX GEMM (only when
  the bottom needs a gradient; never for the first conv of a net) and a dW GEMM (only when
  the weight's lr_mult is nonzero), each as many FLOPs as the forward GEMM, and the bias
  sum (one add per output element).
- InnerProduct (M rows, N outputs, K inputs): forward 2MNK + MN (bias); backward dX 2MNK
  and dW 2MNK, and MN for the bias sum, each only where needed.
- Pooling: the window's elements per output element forward; backward 1 per output
  element (MAX: to the winner) or the window (AVE). LRN: local_size (local_size² within a
  channel) + 5 per element forward, twice that + 6 backward. Eltwise: one FLOP per bottom
  element forward; backward one per needed bottom element (PROD: two). Split: backward sums
  its top diffs, (tops - 1) adds per element.
  These layers count their own (`Layer.flops`, in each layer's module: the layer's fields
  stay the layer's), as each says whether its backward reads its input
  (`Layer.backward_reads_input`).
- Everything else: a few FLOPs per element, from ELEMENTWISE below (per top element in
  forward, per bottom element in backward, unless the row says otherwise). A layer that
  needs no backward (the net pruned it) has no backward FLOPs or bytes.
- Unknown types: 1 FLOP per top element forward, 1 per needed bottom element backward.

Bytes: float32 (4 bytes) read + written by forward and backward together. Forward reads
each bottom once and the parameters, writes each top once (an in-place top is the bottom's
buffer: read once, written once). Backward reads each top diff, the bottoms' data (except
for layers whose gradient does not depend on their input: Split, Concat, Slice, Eltwise
SUM, Dropout) and the parameters (when a bottom needs a gradient), writes each needed
bottom diff, and reads + writes each parameter diff it accumulates. Views (Flatten,
Reshape, and Split's forward) move nothing; data layers write their tops.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

FLOAT_BYTES = 4

# type -> (forward FLOPs per element, backward FLOPs per element, basis of "element").
# basis "top": elements of the tops (an activation's size); "bottom": elements of bottom 0
# (a loss layer's scores, whose top is one number). Rough per-element operation counts of
# the obvious kernel: they matter only for layers a roofline finds memory-bound anyway.
ELEMENTWISE: dict[str, tuple[float, float, str]] = {
    "ReLU": (1, 1, "top"),  # max(x, 0); backward: select
    "PReLU": (2, 4, "top"),
    "ELU": (3, 2, "top"),
    "Sigmoid": (4, 2, "top"),
    "TanH": (4, 2, "top"),
    "Swish": (5, 5, "top"),
    "AbsVal": (1, 2, "top"),
    "BNLL": (4, 4, "top"),
    "Power": (3, 4, "top"),
    "Exp": (2, 1, "top"),
    "Log": (2, 1, "top"),
    "Threshold": (1, 0, "top"),
    "Clip": (2, 1, "top"),
    "Dropout": (2, 1, "top"),  # draw + scale; backward: the mask
    "BatchNorm": (5, 7, "top"),  # mean, variance, normalise; backward: two reductions + affine
    "MVN": (5, 7, "top"),
    "Scale": (2, 3, "top"),  # x·γ + β; backward: dx, dγ (multiply + sum), dβ (sum)
    "Bias": (1, 1, "top"),
    "Softmax": (5, 3, "top"),  # max, subtract, exp, sum, divide; backward: dot, sub, mul
    "SoftmaxWithLoss": (5, 2, "bottom"),  # softmax + log-loss; backward: p - onehot, scale
    "SigmoidCrossEntropyLoss": (6, 2, "bottom"),
    "EuclideanLoss": (3, 2, "bottom"),
    "Accuracy": (1, 0, "bottom"),  # a top-k scan of the scores
    "Concat": (0, 0, "top"),  # copies only
    "Slice": (0, 0, "top"),
    "Silence": (0, 0, "top"),
}
# Convolution, Deconvolution, InnerProduct, Pooling, LRN, Eltwise and Split count their own
# FLOPs from their GEMM or window (Layer.flops, in each layer's module).
DATA_TYPES = frozenset(
    {"Data", "DummyData", "Input", "ImageData", "WindowData", "HDF5Data", "MemoryData"}
)
VIEW_TYPES = frozenset({"Flatten", "Reshape"})


@dataclass(frozen=True)
class LayerCost:
    """One layer's work per pass of the net (the whole batch)."""

    flops_forward: float
    flops_backward: float
    bytes_forward: float
    bytes_backward: float

    @property
    def bytes(self) -> float:
        """float32 bytes read + written by forward and backward together."""
        return self.bytes_forward + self.bytes_backward


def net_costs(net: Any) -> list[LayerCost]:
    """layer_cost of every layer of `net`, in net order."""
    return [layer_cost(net, i) for i in range(len(net.layers))]


def layer_cost(net: Any, index: int) -> LayerCost:
    """FLOPs and bytes of layer `index` of a built caffe.Net, at its current blob shapes."""
    layer = net.layers[index]
    bottoms: Sequence[Any] = net.bottom_vecs[index]
    tops: Sequence[Any] = net.top_vecs[index]
    bottom_need = list(net.bottom_need_backward[index])
    param_need = list(layer.param_propagate_down)
    backward = bool(net.layer_need_backward[index]) and (any(bottom_need) or any(param_need))
    if not backward:
        bottom_need = [False] * len(bottom_need)
        param_need = [False] * len(param_need)
    kind = layer.type
    flops_f, flops_b = _flops(layer, kind, bottoms, tops, bottom_need, param_need)
    bytes_f, bytes_b = _bytes(layer, kind, bottoms, tops, bottom_need, param_need, backward)
    return LayerCost(float(flops_f), float(flops_b if backward else 0.0),
                     float(bytes_f), float(bytes_b))  # fmt: skip


# ----- FLOPs ------------------------------------------------------------------------------
def _flops(
    layer: Any,
    kind: str,
    bottoms: Sequence[Any],
    tops: Sequence[Any],
    bottom_need: list[bool],
    param_need: list[bool],
) -> tuple[float, float]:
    if kind in DATA_TYPES or kind in VIEW_TYPES:
        return 0.0, 0.0
    counted = layer.flops(bottoms, tops, bottom_need, param_need)
    if counted is not None:  # the layer counts its own GEMM or window (Layer.flops)
        return counted
    row = ELEMENTWISE.get(kind)
    if row is None:  # unknown: the elements-based default
        return _elements(tops), _elements([b for b, need in zip(bottoms, bottom_need) if need])
    forward_per, backward_per, basis = row
    elements = _elements(tops) if basis == "top" else (bottoms[0].count if bottoms else 0)
    return forward_per * elements, backward_per * elements


# ----- bytes ------------------------------------------------------------------------------
def _bytes(
    layer: Any,
    kind: str,
    bottoms: Sequence[Any],
    tops: Sequence[Any],
    bottom_need: list[bool],
    param_need: list[bool],
    backward: bool,
) -> tuple[float, float]:
    params = sum(blob.count for blob in layer.blobs)
    top_elements = _elements(tops)
    bottom_elements = _elements(bottoms)
    if kind in VIEW_TYPES:
        return 0.0, 0.0
    if kind in DATA_TYPES:
        return FLOAT_BYTES * top_elements, 0.0
    forward = 0 if kind == "Split" else bottom_elements + params + top_elements
    if not backward:
        return FLOAT_BYTES * forward, 0.0
    needed_bottoms = _elements([b for b, need in zip(bottoms, bottom_need) if need])
    reads_input = layer.backward_reads_input()
    grad_params = sum(blob.count for blob, need in zip(layer.blobs, param_need) if need)
    back = top_elements + needed_bottoms + 2 * grad_params
    if reads_input:
        back += bottom_elements
    if needed_bottoms:
        back += params  # dX reads the weights
    return FLOAT_BYTES * forward, FLOAT_BYTES * back


def _elements(blobs: Sequence[Any]) -> int:
    """Elements of the distinct blobs (a blob listed twice is one buffer)."""
    seen: dict[int, int] = {}
    for blob in blobs:
        seen[id(blob)] = blob.count
    return sum(seen.values())
