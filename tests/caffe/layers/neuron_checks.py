"""Checks shared by the neuron-layer tests: in place (top = bottom) must give exactly what
out of place gives, even when a later in-place layer replaces the blob's data before
backward runs (so a layer may not read its input or output back from the blob)."""

from __future__ import annotations

import numpy as np
import torch

from caffe.blob import Blob
from caffe.layer import create_layer
from caffe.proto import caffe_pb2
from tests.caffe.layer_harness import layer_param

CPU = torch.device("cpu")


def _blob(array: np.ndarray) -> Blob:
    blob = Blob(array.shape, device=CPU)
    blob.data[...] = array
    return blob


def forward_backward_both_ways(
    text: str, x: np.ndarray, phase: int = caffe_pb2.TRAIN, seed: int = 11
) -> tuple[np.ndarray, np.ndarray]:
    """Run one layer out of place and in place on x; assert both agree; return (y, dx)."""
    param = layer_param(text)
    param.phase = phase
    layer = create_layer(param, CPU)
    bottom, top = _blob(x), Blob(device=CPU)
    layer.run_setup([bottom], [top])
    layer.need_backward = True
    layer.bottom_need_backward = [True]
    layer.param_propagate_down = [True] * len(layer.blobs)
    dy = np.random.default_rng(seed).uniform(-1, 1, x.shape).astype(np.float32)

    def run(bottoms: list[Blob], tops: list[Blob]) -> tuple[np.ndarray, np.ndarray, list]:
        for blob in layer.blobs:
            blob.diff[...] = 0
        torch.manual_seed(seed)  # the same dropout mask both ways
        layer.run_forward(bottoms, tops)
        y = tops[0].data.copy()
        if tops[0] is bottoms[0]:
            # A later in-place layer publishes its own output into the shared blob.
            tops[0].set_data(torch.full(tuple(x.shape), 123.0))
        tops[0].diff[...] = dy
        layer.run_backward(tops, [True], bottoms)
        return y, bottoms[0].diff.copy(), [b.diff.copy() for b in layer.blobs]

    y, dx, param_diffs = run([bottom], [top])
    np.testing.assert_array_equal(bottom.data, x, err_msg="forward modified its bottom")
    shared = _blob(x)
    y_in, dx_in, param_diffs_in = run([shared], [shared])
    np.testing.assert_allclose(y_in, y, rtol=1e-6, atol=1e-7, err_msg="in-place forward")
    np.testing.assert_allclose(dx_in, dx, rtol=1e-6, atol=1e-7, err_msg="in-place backward")
    for a, b in zip(param_diffs_in, param_diffs):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7, err_msg="in-place param diff")
    return y, dx
