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
    net.backward()  # parameter gradients accumulate
    np.testing.assert_allclose(weight.diff, 2 * expected, rtol=1e-6)


def test_saved_and_loaded_like_any_parameter(tmp_path):
    net = build()
    net.params["p"][0].data[...] = 7
    path = str(tmp_path / "p.caffemodel")
    net.save(path)
    other = build()
    other.copy_from(path)
    np.testing.assert_array_equal(other.params["p"][0].data, 7)
