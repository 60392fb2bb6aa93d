"""The residual-net pattern BatchNorm → Scale → activation, all in place on one blob, must
train exactly like the same chain with distinct blobs: each layer's backward may not read
its input or output back from the shared blob, which later layers have overwritten."""

import numpy as np
import pytest
from google.protobuf import text_format

import caffe
from caffe.proto import caffe_pb2

CHAIN = """
force_backward: true
layer { name: "in" type: "Input" top: "x" top: "t"
        input_param { shape { dim: 5 dim: 3 } shape { dim: 5 dim: 4 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "a"
        inner_product_param { num_output: 4 weight_filler { type: "gaussian" } } }
layer { name: "bn" type: "BatchNorm" bottom: "a" top: "B" }
layer { name: "scale" type: "Scale" bottom: "B" top: "C" scale_param { bias_term: true
        filler { type: "uniform" min: 0.5 max: 2 } bias_filler { type: "uniform" } } }
layer { name: "act" type: "ACTIVATION" bottom: "C" top: "D" }
layer { name: "loss" type: "EuclideanLoss" bottom: "D" bottom: "t" top: "loss" }
"""


def build(activation, in_place):
    text = CHAIN.replace("ACTIVATION", activation)
    if in_place:
        for name in ("B", "C", "D"):
            text = text.replace(f'"{name}"', '"a"')
    param = text_format.Parse(text, caffe_pb2.NetParameter())
    param.state.phase = caffe.TRAIN
    return caffe.Net(param)


@pytest.mark.parametrize("activation", ["Sigmoid", "TanH", "AbsVal", "ELU", "PReLU", "Swish"])
def test_in_place_chain_trains_like_distinct_blobs(activation):
    caffe.set_random_seed(5)
    separate = build(activation, in_place=False)
    caffe.set_random_seed(5)
    shared = build(activation, in_place=True)
    x = np.random.default_rng(100).normal(0, 1, (5, 3))
    for net in (separate, shared):
        net.blobs["x"].data[...] = x
        net.blobs["t"].data[...] = 0.5
        net.clear_param_diffs()
        net.forward()
        net.backward()
    assert len(shared.blobs) < len(separate.blobs)
    np.testing.assert_allclose(shared.blobs["loss"].data, separate.blobs["loss"].data, rtol=1e-6)
    for name in ("ip", "scale"):
        for a, b in zip(shared.params[name], separate.params[name]):
            np.testing.assert_allclose(a.diff, b.diff, rtol=1e-5, atol=1e-7)
    assert np.abs(separate.blobs["x"].diff).max() > 0
    np.testing.assert_allclose(shared.blobs["x"].diff, separate.blobs["x"].diff, rtol=1e-5)
