"""Run one layer on CPU and on CUDA with the same inputs and weights; compare both passes.

Used by the layer tests under `@pytest.mark.skipif(not torch.cuda.is_available(), ...)`:
forward tops, bottom diffs and parameter diffs must agree within float32 tolerance.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
import torch

from caffe.blob import Blob
from caffe.layer import Layer, create_layer
from caffe.proto import caffe_pb2
from tests.caffe.layer_harness import layer_param

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _build(text: str, arrays, num_tops: int, phase: int, device: torch.device):
    param = layer_param(text)
    param.phase = phase
    layer = create_layer(param, device)
    bottom = []
    for array in arrays:
        blob = Blob(np.shape(array), device=device)
        blob.data[...] = array
        bottom.append(blob)
    top = [Blob(device=device) for _ in range(num_tops)]
    layer.run_setup(bottom, top)
    layer.need_backward = True
    layer.bottom_need_backward = [True] * len(bottom)
    layer.param_propagate_down = [True] * len(layer.blobs)
    return layer, bottom, top


def _forward(layer: Layer, bottom, top) -> list:
    layer.run_forward(bottom, top)
    return [t.data.copy() for t in top]


def _backward(layer: Layer, bottom, top, top_diffs, propagate) -> tuple[list, list]:
    for blob in layer.blobs:
        blob.diff[...] = 0
    for blob, diff in zip(top, top_diffs):
        blob.diff[...] = diff
    layer.run_backward(top, propagate, bottom)
    bottom_diffs = [b.diff.copy() if down else None for b, down in zip(bottom, propagate)]
    return bottom_diffs, [b.diff.copy() for b in layer.blobs]


def assert_cuda_matches_cpu(
    text: str,
    arrays: Sequence[np.ndarray],
    num_tops: int = 1,
    phase: int = caffe_pb2.TRAIN,
    propagate: Sequence[bool] | None = None,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    device: str = "cuda",
) -> None:
    """`device="cpu"` runs the comparison CPU against CPU: how the harness itself is tested
    without a GPU (tests/caffe/layers/test_lstm.py)."""
    cpu = _build(text, arrays, num_tops, phase, torch.device("cpu"))
    gpu = _build(text, arrays, num_tops, phase, torch.device(device))
    for source, target in zip(cpu[0].blobs, gpu[0].blobs):
        target.data[...] = source.data
    # One forward per side (a second would advance a stateful layer, a recurrent layer's
    # carried hidden state, on one side only); the top diffs are drawn after it, from the
    # tops' shapes as the forward left them (Filter's depend on the selector's values).
    expected = [_forward(*cpu)]
    got = [_forward(*gpu)]
    rng = np.random.default_rng(0)
    top_diffs = [rng.standard_normal(t.shape).astype(np.float32) for t in cpu[2]]
    propagate = [True] * len(arrays) if propagate is None else list(propagate)
    expected += _backward(*cpu, top_diffs, propagate)
    got += _backward(*gpu, top_diffs, propagate)
    for kind, want_list, got_list in zip(("top", "bottom diff", "param diff"), expected, got):
        for i, (want, have) in enumerate(zip(want_list, got_list)):
            if want is None:
                continue
            np.testing.assert_allclose(have, want, rtol=rtol, atol=atol, err_msg=f"{kind} {i}")
