"""Test harness for single layers: build one from prototxt text, run it, and check its
backward against central finite differences with Caffe's GradientChecker tolerances.

The objective is L = Σ_t Σ_i top_t[i] · R_t[i] for fixed random R_t, so one backward
pass gives the analytic gradient of every input and parameter at once; each input
element is then perturbed by ±stepsize and L recomputed. Errors are judged as Caffe
does: |analytic − numeric| ≤ threshold · max(|analytic|, |numeric|, 1), skipping
inputs within kink_range of a kink (non-differentiable points such as ReLU's 0).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from google.protobuf import text_format

from caffe.blob import Blob
from caffe.layer import Layer, create_layer
from caffe.proto import caffe_pb2


def layer_param(text: str) -> caffe_pb2.LayerParameter:
    param = text_format.Parse(text, caffe_pb2.LayerParameter())
    if not param.name:
        param.name = "under_test"
    return param


def make_layer(
    text: str,
    bottoms: Sequence[np.ndarray],
    num_tops: int = 1,
    phase: int = caffe_pb2.TRAIN,
) -> tuple[Layer, list[Blob], list[Blob]]:
    """Create and set up a layer on CPU with bottoms holding copies of the given arrays."""
    param = layer_param(text)
    param.phase = phase
    layer = create_layer(param, torch.device("cpu"))
    bottom = []
    for array in bottoms:
        blob = Blob(np.shape(array), device=torch.device("cpu"))
        blob.data[...] = array
        bottom.append(blob)
    top = [Blob(device=torch.device("cpu")) for _ in range(num_tops)]
    layer.run_setup(bottom, top)
    layer.need_backward = True
    layer.bottom_need_backward = [True] * len(bottom)
    layer.param_propagate_down = [True] * len(layer.blobs)
    return layer, bottom, top


def run_forward(layer: Layer, bottom: list[Blob], top: list[Blob]) -> list[np.ndarray]:
    layer.run_forward(bottom, top)
    return [t.data.copy() for t in top]


def _objective(layer, bottom, top, weights, seed) -> float:
    torch.manual_seed(seed)
    layer.run_forward(bottom, top)
    return float(sum((t.data.astype(np.float64) * w).sum() for t, w in zip(top, weights)))


def check_gradient(
    layer: Layer,
    bottom: list[Blob],
    top: list[Blob],
    check_bottom: Sequence[int] | None = None,
    check_params: bool = True,
    stepsize: float = 1e-2,
    threshold: float = 1e-3,
    kink: float = 0.0,
    kink_range: float = -1.0,
    seed: int = 1701,
    top_ids: Sequence[int] | None = None,
) -> int:
    """Assert analytic == numeric gradients; returns how many elements were checked."""
    check_bottom = range(len(bottom)) if check_bottom is None else check_bottom
    top_ids = range(len(top)) if top_ids is None else top_ids
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    layer.run_forward(bottom, top)
    weights = [
        rng.uniform(-1, 1, t.shape).astype(np.float64) if i in top_ids else np.zeros(t.shape)
        for i, t in enumerate(top)
    ]
    for blob in layer.blobs:
        blob.diff[...] = 0
    for t, w in zip(top, weights):
        t.diff[...] = w
    propagate = [i in check_bottom for i in range(len(bottom))]
    layer.run_backward(top, propagate, bottom)
    targets = [("bottom", i, bottom[i]) for i in check_bottom]
    if check_params:
        targets += [("param", i, b) for i, b in enumerate(layer.blobs)]
    analytic = {(kind, i): blob.diff.copy() for kind, i, blob in targets}
    checked = 0
    for kind, i, blob in targets:
        flat = blob.data.reshape(-1)
        expected = analytic[(kind, i)].reshape(-1)
        for j in range(flat.size):
            original = float(flat[j])
            if kink_range > 0 and abs(original - kink) <= kink_range:
                continue
            flat[j] = original + stepsize
            plus = _objective(layer, bottom, top, weights, seed)
            flat[j] = original - stepsize
            minus = _objective(layer, bottom, top, weights, seed)
            flat[j] = original
            numeric = (plus - minus) / (2 * stepsize)
            a = float(expected[j])
            scale = max(abs(a), abs(numeric), 1.0)
            assert abs(a - numeric) <= threshold * scale, (
                f"{layer.type} {kind} {i} element {j}: analytic {a:.6g} vs numeric "
                f"{numeric:.6g} (threshold {threshold} x {scale:.3g})"
            )
            checked += 1
    return checked
