"""Checks shared by the neuron-layer tests: in place (top = bottom) must give exactly what
out of place gives - also when a later in-place layer overwrites the top's data before
backward runs, since a layer keeps a copy of the input it needs (the in-place write
destroys it) and reads its top's data at backward time in both cases, as Caffe does."""

from __future__ import annotations

import numpy as np
import torch

from caffe.blob import Blob
from caffe.layer import create_layer
from caffe.proto import caffe_pb2
from tests.caffe.layer_harness import layer_param

CPU = torch.device("cpu")
LATER_VALUE = 123.0  # what the "later in-place layer" writes into the top


def _blob(array: np.ndarray) -> Blob:
    blob = Blob(array.shape, device=CPU)
    blob.data[...] = array
    return blob


def forward_backward_both_ways(
    text: str,
    x: np.ndarray,
    phase: int = caffe_pb2.TRAIN,
    seed: int = 11,
    later_in_place: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Run one layer out of place and in place on x; assert both agree; return (y, dx).

    With later_in_place, run both ways again with the top overwritten by LATER_VALUE
    before backward, and assert they still agree."""
    param = layer_param(text)
    param.phase = phase
    layer = create_layer(param, CPU)
    bottom, top = _blob(x), Blob(device=CPU)
    layer.run_setup([bottom], [top])
    layer.need_backward = True
    layer.bottom_need_backward = [True]
    layer.param_propagate_down = [True] * len(layer.blobs)
    dy = np.random.default_rng(seed).uniform(-1, 1, x.shape).astype(np.float32)

    def run(bottoms: list[Blob], tops: list[Blob], overwrite: bool) -> tuple:
        for blob in layer.blobs:
            blob.diff[...] = 0
        torch.manual_seed(seed)  # the same dropout mask both ways
        layer.run_forward(bottoms, tops)
        y = tops[0].data.copy()
        if overwrite:
            # A later in-place layer writes its own output into the top's memory.
            tops[0].set_data(torch.full(tuple(x.shape), LATER_VALUE))
        tops[0].diff[...] = dy
        layer.run_backward(tops, [True], bottoms)
        return y, bottoms[0].diff.copy(), [b.diff.copy() for b in layer.blobs]

    def assert_same(a: tuple, b: tuple, what: str) -> None:
        np.testing.assert_allclose(a[0], b[0], rtol=1e-6, atol=1e-7, err_msg=f"{what} forward")
        np.testing.assert_allclose(a[1], b[1], rtol=1e-6, atol=1e-7, err_msg=f"{what} backward")
        for pa, pb in zip(a[2], b[2]):
            np.testing.assert_allclose(pa, pb, rtol=1e-6, atol=1e-7, err_msg=f"{what} param")

    apart = run([bottom], [top], overwrite=False)
    np.testing.assert_array_equal(bottom.data, x, err_msg="forward modified its bottom")
    shared = _blob(x)
    assert_same(run([shared], [shared], overwrite=False), apart, "in-place")
    if later_in_place:
        apart_later = run([_blob(x)], [Blob(device=CPU)], overwrite=True)
        shared = _blob(x)
        assert_same(run([shared], [shared], overwrite=True), apart_later, "later in-place")
    return apart[0], apart[1]
