"""AutogradLayer (caffe/layer.py), the base of Im2col, LSTMUnit and the recurrent layers,
tested on its own with a small subclass: forward is `compute`, backward is its exact
gradient (finite differences), parameter diffs accumulate and bottom diffs overwrite,
what backward skips, an in-place top, and no graph outside training."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from caffe.blob import Blob
from caffe.errors import CaffeError
from caffe.layer import AutogradLayer
from caffe.proto import caffe_pb2
from tests.caffe.layer_harness import check_gradient

CPU = torch.device("cpu")


class ScaledTanh(AutogradLayer):
    """top0 = tanh(x · w + b), top1 = x · x: one parameterised and one plain output."""

    exact_num_bottom = 1
    min_top = 1
    max_top = 2

    def setup(self, bottom, top):
        self.blobs.add_blob(*bottom[0].shape[1:])
        self.blobs.add_blob(1)
        self.blobs[0].data[...] = np.linspace(-1.0, 1.5, self.blobs[0].count).reshape(
            self.blobs[0].shape
        )
        self.blobs[1].data[...] = 0.25

    def reshape(self, bottom, top):
        for t in top:
            t.reshape(bottom[0].shape)

    def compute(self, bottoms, params):
        x = bottoms[0]
        return [torch.tanh(x * params[0] + params[1]), x * x][: self.num_tops]


def make(shape=(2, 3), tops=2, in_place=False):
    rng = np.random.default_rng(5)
    param = caffe_pb2.LayerParameter(name="scaled_tanh", type="ScaledTanh")
    layer = ScaledTanh(param, CPU)
    layer.num_tops = tops
    bottom = [Blob(shape, device=CPU)]
    bottom[0].data[...] = rng.uniform(-1, 1, shape)
    top = [bottom[0]] if in_place else [Blob(device=CPU) for _ in range(tops)]
    layer.run_setup(bottom, top)
    layer.need_backward = True
    layer.bottom_need_backward = [True]
    layer.param_propagate_down = [True, True]
    return layer, bottom, top


def test_forward_is_compute():
    layer, bottom, top = make()
    x, w, b = bottom[0].data.copy(), layer.blobs[0].data, layer.blobs[1].data
    layer.run_forward(bottom, top)
    np.testing.assert_allclose(top[0].data, np.tanh(x * w + b), rtol=1e-6)
    np.testing.assert_allclose(top[1].data, x * x, rtol=1e-6)


def test_backward_is_the_exact_gradient():
    layer, bottom, top = make()
    assert check_gradient(layer, bottom, top) > 0


def test_parameter_diffs_accumulate_bottom_diffs_overwrite():
    layer, bottom, top = make(tops=1)
    bottom[0].diff[...] = 7.0  # stale: must be replaced
    layer.blobs[0].diff[...] = 1.0  # an earlier pass (iter_size): must be added to
    layer.run_forward(bottom, top)
    top[0].diff[...] = 1.0
    layer.run_backward(top, [True], bottom)
    x, w, b = bottom[0].data, layer.blobs[0].data, layer.blobs[1].data
    slope = 1.0 - np.tanh(x * w + b) ** 2
    np.testing.assert_allclose(bottom[0].diff, slope * w, rtol=1e-5)
    np.testing.assert_allclose(layer.blobs[0].diff, 1.0 + (slope * x).sum(0), rtol=1e-5)


def test_what_backward_skips_stays_untouched():
    layer, bottom, top = make(tops=1)
    layer.param_propagate_down = [False, True]
    bottom[0].diff[...] = 3.0
    layer.run_forward(bottom, top)
    top[0].diff[...] = 1.0
    layer.run_backward(top, [False], bottom)
    assert (bottom[0].diff == 3.0).all()  # propagate_down false
    assert (layer.blobs[0].diff == 0.0).all()  # param_propagate_down false
    assert layer.blobs[1].diff[0] != 0.0


def test_an_in_place_top_keeps_the_gradient_of_the_input():
    layer, bottom, top = make(tops=1, in_place=True)
    x = bottom[0].data.copy()
    w, b = layer.blobs[0].data, layer.blobs[1].data
    layer.run_forward(bottom, top)  # overwrites x with the output
    top[0].diff[...] = 1.0
    layer.run_backward(top, [True], bottom)
    np.testing.assert_allclose(bottom[0].diff, (1.0 - np.tanh(x * w + b) ** 2) * w, rtol=1e-5)


def test_no_graph_without_training_and_a_clear_error_for_backward():
    layer, bottom, top = make(tops=1)
    with torch.no_grad():
        layer.run_forward(bottom, top)
    with pytest.raises(CaffeError, match=r"scaled_tanh.*backward called without a recorded"):
        layer.run_backward(top, [True], bottom)
