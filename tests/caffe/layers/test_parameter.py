import numpy as np
from google.protobuf import text_format

import caffe
from caffe.proto import caffe_pb2

NET = """
layer { name: "p" type: "Parameter" top: "w" parameter_param { shape { dim: 2 dim: 3 } } }
layer { name: "in" type: "Input" top: "t" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "w" bottom: "t" top: "loss" }
"""


def build():
    param = text_format.Parse(NET, caffe_pb2.NetParameter())
    param.state.phase = caffe.TRAIN
    return caffe.Net(param)


def test_top_is_the_parameter_and_gradients_reach_it():
    net = build()
    weight = net.params["p"][0]
    assert weight.shape == [2, 3]
    np.testing.assert_array_equal(weight.data, 0)  # no filler: zeros
    weight.data[...] = np.arange(6).reshape(2, 3)
    target = np.ones((2, 3), np.float32)
    net.blobs["t"].data[...] = target
    loss = net.forward()["loss"]
    np.testing.assert_array_equal(net.blobs["w"].data, weight.data)
    np.testing.assert_allclose(loss, ((weight.data - target) ** 2).sum() / 4, rtol=1e-6)
    net.backward()
    expected = (weight.data - target) / 2
    np.testing.assert_allclose(weight.diff, expected, rtol=1e-6)
    # The top's diff is the parameter's (BVLC's ShareDiff): the loss writes the gradient
    # into it, so a second backward writes it again instead of adding (BVLC's arithmetic).
    assert net.blobs["w"].diff.ctypes.data == weight.diff.ctypes.data
    net.backward()
    np.testing.assert_allclose(weight.diff, expected, rtol=1e-6)


def test_saved_and_loaded_like_any_parameter(tmp_path):
    net = build()
    net.params["p"][0].data[...] = 7
    path = str(tmp_path / "p.caffemodel")
    net.save(path)
    other = build()
    other.copy_from(path)
    np.testing.assert_array_equal(other.params["p"][0].data, 7)


def test_two_consumers_sum_through_the_split_into_the_parameter():
    # BVLC: the Split inserted for two consumers writes the sum of their gradients into its
    # bottom's diff, which is the parameter's: d/dw of (|w-a|² + |w-b|²)/4 = ((w-a) + (w-b))/2.
    text = NET.replace(
        'bottom: "w" bottom: "t" top: "loss" }',
        'bottom: "w" bottom: "t" top: "loss" }\n'
        'layer { name: "in2" type: "Input" top: "u" input_param { shape { dim: 2 dim: 3 } } }\n'
        'layer { name: "loss2" type: "EuclideanLoss" bottom: "w" bottom: "u" top: "loss2" }',
    )
    param = text_format.Parse(text, caffe_pb2.NetParameter())
    param.state.phase = caffe.TRAIN
    net = caffe.Net(param)
    weight = net.params["p"][0]
    weight.data[...] = np.arange(6).reshape(2, 3)
    a, b = np.ones((2, 3), np.float32), np.full((2, 3), -2.0, np.float32)
    net.blobs["t"].data[...], net.blobs["u"].data[...] = a, b
    net.forward()
    for _ in range(2):  # written, not added to, each time
        net.backward()
        np.testing.assert_allclose(weight.diff, ((weight.data - a) + (weight.data - b)) / 2,
                                   rtol=1e-6)  # fmt: skip
