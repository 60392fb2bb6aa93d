"""Caffe's in-place semantics: a top that later in-place layers overwrite is one buffer, so
a layer whose backward reads its top's data (BVLC's LRN, Sigmoid, TanH, ELU, Exp, Power,
Softmax, Swish, MVN) computes its gradient from the values the later layer left there.
Each case is checked against the gradient written out as BVLC's Backward_cpu computes it,
with top_data the blob's values after the later layer; layers whose backward reads only
their input (or a private copy, like BatchNorm's x_norm_) must not notice the later layer.
"""

import numpy as np
import pytest
from google.protobuf import text_format

import caffe
from caffe.proto import caffe_pb2

SHAPE = (2, 4, 3, 3)
SHIFT = -0.25  # what the later in-place layer (a Bias) adds to the top

NET = """
force_backward: true
layer {{ name: "in" type: "Input" top: "x"
        input_param {{ shape {{ dim: 2 dim: 4 dim: 3 dim: 3 }} }} }}
layer {{ name: "under_test" bottom: "x" top: "y" {layer} }}
{later}
"""
LATER_BIAS = f"""layer {{ name: "later" type: "Bias" bottom: "y" top: "y"
        bias_param {{ filler {{ type: "constant" value: {SHIFT} }} }} }}"""
LATER_LEAKY_RELU = """layer { name: "later" type: "ReLU" bottom: "y" top: "y"
        relu_param { negative_slope: 0.1 } }"""


def build(layer: str, later: str) -> caffe.Net:
    param = text_format.Parse(NET.format(layer=layer, later=later), caffe_pb2.NetParameter())
    param.state.phase = caffe.TRAIN
    return caffe.Net(param)


def run(layer: str, later: str, x: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward with top diff g; returns (the top's data after forward, dx)."""
    net = build(layer, later)
    net.forward(x=x)
    y = net.blobs["y"].data.astype(np.float64)
    return y, net.backward(y=g)["x"].astype(np.float64)


def inputs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(0, 1, SHAPE).astype(np.float32), rng.uniform(-1, 1, SHAPE)


# ----- BVLC's Backward_cpu, written out: x bottom data, y top data, g top diff ----------------
def _channel_window_sum(a: np.ndarray, size: int) -> np.ndarray:
    half = (size - 1) // 2
    padded = np.pad(a, ((0, 0), (half, half), (0, 0), (0, 0)))
    return sum(padded[:, c : c + a.shape[1]] for c in range(size))


def lrn_backward(x, y, g, size=3, alpha=0.5, beta=0.75, k=2.0):
    scale = k + alpha / size * _channel_window_sum(x * x, size)
    ratio = _channel_window_sum(g * y / scale, size)
    return g * scale**-beta - 2 * alpha * beta / size * x * ratio


def mvn_backward(x, y, g, eps=1e-9):
    rows = (SHAPE[0] * SHAPE[1], -1)
    xr, yr, gr = x.reshape(rows), y.reshape(rows), g.reshape(rows)
    std = xr.std(axis=1, keepdims=True) + eps
    dx = (gr - gr.mean(1, keepdims=True) - yr * (gr * yr).mean(1, keepdims=True)) / std
    return dx.reshape(SHAPE)


def swish_backward(x, y, g, beta=1.3):
    gate = 1 / (1 + np.exp(-beta * x))
    return g * (beta * y + gate * (1 - beta * y))


READS_TOP = {
    "Sigmoid": ('type: "Sigmoid"', lambda x, y, g: g * y * (1 - y)),
    "TanH": ('type: "TanH"', lambda x, y, g: g * (1 - y * y)),
    "ELU": ('type: "ELU" elu_param { alpha: 0.8 }',
            lambda x, y, g: g * ((x > 0) + (0.8 + y) * (x <= 0))),
    "Exp": ('type: "Exp" exp_param { scale: 0.7 shift: 0.1 }', lambda x, y, g: g * y * 0.7),
    "Power": ('type: "Power" power_param { power: 3 scale: 0.8 shift: 0.2 }',
              lambda x, y, g: g * 3 * 0.8 * y / (0.2 + 0.8 * x)),
    "Softmax": ('type: "Softmax"', lambda x, y, g: y * (g - (g * y).sum(axis=1, keepdims=True))),
    "Swish": ('type: "Swish" swish_param { beta: 1.3 }', swish_backward),
    "MVN": ('type: "MVN"', mvn_backward),
    "LRN": ('type: "LRN" lrn_param { local_size: 3 alpha: 0.5 beta: 0.75 k: 2 }', lrn_backward),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(READS_TOP))
def test_backward_reads_the_top_a_later_in_place_layer_overwrote(name):
    layer, bvlc_backward = READS_TOP[name]
    x, g = inputs(3)
    y_later, dx = run(layer, LATER_BIAS, x, g)
    expected = bvlc_backward(x.astype(np.float64), y_later, g)
    np.testing.assert_allclose(dx, expected, rtol=1e-4, atol=1e-5)
    # The layer's own output gives a different gradient: the test can tell them apart.
    own = bvlc_backward(x.astype(np.float64), y_later - SHIFT, g)
    assert np.abs(own - expected).max() > 1e-2


def test_lrn_followed_by_in_place_leaky_relu_matches_caffe():
    # The example: BVLC's LRN backward sees the leaky-ReLU'd top.
    layer = READS_TOP["LRN"][0]
    x, g = inputs(4)
    y_relu, dx = run(layer, LATER_LEAKY_RELU, x, g)
    g_lrn = g * np.where(y_relu > 0, 1.0, 0.1)  # ReLU's in-place backward
    expected = lrn_backward(x.astype(np.float64), y_relu, g_lrn)
    np.testing.assert_allclose(dx, expected, rtol=1e-4, atol=1e-6)
    own_y = np.where(y_relu > 0, y_relu, y_relu / 0.1)
    assert np.abs(lrn_backward(x.astype(np.float64), own_y, g_lrn) - expected).max() > 1e-3


READS_INPUT = {
    "ReLU": 'type: "ReLU" relu_param { negative_slope: 0.2 }',
    "AbsVal": 'type: "AbsVal"',
    "BNLL": 'type: "BNLL"',
    "Clip": 'type: "Clip" clip_param { min: -0.5 max: 0.6 }',
    "PReLU": 'type: "PReLU"',
    "Power2": 'type: "Power" power_param { power: 2 scale: 0.8 shift: 0.2 }',
    "BatchNorm": 'type: "BatchNorm"',  # reads its private x_norm_ copy in BVLC
    "LRNWithin": 'type: "LRN" lrn_param { local_size: 3 alpha: 0.5 norm_region: WITHIN_CHANNEL }',
    "Dropout": 'type: "Dropout" dropout_param { dropout_ratio: 0 }',
}


@pytest.mark.parametrize("name", sorted(READS_INPUT))
def test_backward_from_the_input_ignores_a_later_in_place_layer(name):
    x, g = inputs(5)
    _, dx_alone = run(READS_INPUT[name], "", x, g)
    _, dx_later = run(READS_INPUT[name], LATER_BIAS, x, g)
    np.testing.assert_allclose(dx_later, dx_alone, rtol=1e-6, atol=1e-7)


def test_in_place_relu_reads_the_blob_as_caffe():
    # BVLC's ReLU backward reads its bottom's data; in place that is the blob's values
    # after later in-place layers (here relu(x) - 0.25), not x.
    text = NET.format(layer='type: "ReLU"', later=LATER_BIAS).replace('top: "y"', 'top: "x"')
    text = text.replace('bottom: "y"', 'bottom: "x"')
    param = text_format.Parse(text, caffe_pb2.NetParameter())
    param.state.phase = caffe.TRAIN
    net = caffe.Net(param)
    x, g = inputs(6)
    net.forward(x=x)
    x_later = net.blobs["x"].data.copy()
    dx = net.backward(x=g)["x"]
    np.testing.assert_allclose(dx, g * (x_later > 0), rtol=1e-6)
    assert np.any((x > 0) & (x_later <= 0))  # cases where the input's sign would differ
