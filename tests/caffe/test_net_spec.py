"""caffe.net_spec (pycaffe's NetSpec, layers/L, params/P, to_proto), docs/caffe_format.md §5.7."""

from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format

import caffe
from caffe import layers as L
from caffe import params as P
from caffe.net_spec import SHARED_PARAM_NAMES, Function, Top, param_name_dict
from caffe.proto import caffe_pb2

LENET = Path(__file__).resolve().parents[2] / "models" / "lenet" / "train_val.prototxt"


def lenet_layers(n: caffe.NetSpec, phase: int, source: str, batch_size: int) -> None:
    """LeNet as pycaffe's examples write it, with the hand-written prototxt's settings."""
    learned = [dict(lr_mult=1), dict(lr_mult=2)]
    fillers = dict(weight_filler=dict(type="xavier"), bias_filler=dict(type="constant"))
    n.data, n.label = L.Data(
        name="mnist",
        include=dict(phase=phase),
        transform_param=dict(scale=1.0 / 256),
        source=source,
        batch_size=batch_size,
        backend=P.Data.LMDB,
        ntop=2,
    )
    n.conv1 = L.Convolution(
        n.data, param=learned, num_output=20, kernel_size=5, stride=1, **fillers
    )
    n.pool1 = L.Pooling(n.conv1, pool=P.Pooling.MAX, kernel_size=2, stride=2)
    n.conv2 = L.Convolution(
        n.pool1, param=learned, num_output=50, kernel_size=5, stride=1, **fillers
    )
    n.pool2 = L.Pooling(n.conv2, pool=P.Pooling.MAX, kernel_size=2, stride=2)
    n.ip1 = L.InnerProduct(n.pool2, param=learned, num_output=500, **fillers)
    n.relu1 = L.ReLU(n.ip1, in_place=True)
    n.ip2 = L.InnerProduct(n.relu1, param=learned, num_output=10, **fillers)
    n.accuracy = L.Accuracy(n.ip2, n.label, include=dict(phase=caffe.TEST))
    n.loss = L.SoftmaxWithLoss(n.ip2, n.label)


def test_lenet_built_with_net_spec_equals_the_zoo_prototxt():
    train = caffe.NetSpec()
    lenet_layers(train, caffe.TRAIN, "examples/mnist/mnist_train_lmdb", 64)
    test = caffe.NetSpec()
    lenet_layers(test, caffe.TEST, "examples/mnist/mnist_test_lmdb", 100)
    built = caffe_pb2.NetParameter(name="LeNet")
    train_layers = train.to_proto().layer
    built.layer.extend([train_layers[0], test.to_proto().layer[0], *train_layers[1:]])
    expected = text_format.Parse(LENET.read_text(), caffe_pb2.NetParameter())
    assert text_format.MessageToString(built) == text_format.MessageToString(expected)
    assert built == expected


def test_to_proto_names_layers_and_tops_by_type():
    data = L.Input(shape=dict(dim=[2, 3]))
    net = caffe.to_proto(L.Softmax(L.InnerProduct(data, num_output=4), axis=1))
    assert [(layer.name, list(layer.bottom), list(layer.top)) for layer in net.layer] == [
        ("Input1", [], ["Input1"]),
        ("InnerProduct1", ["Input1"], ["InnerProduct1"]),
        ("Softmax1", ["InnerProduct1"], ["Softmax1"]),
    ]
    assert net.layer[1].inner_product_param.num_output == 4
    assert net.layer[2].softmax_param.axis == 1


def test_top_to_proto_is_to_proto_of_that_top():
    top = L.ReLU(L.Input(shape=dict(dim=[1])))
    assert top.to_proto() == caffe.to_proto(top)


def test_ntop_gives_tuples_or_the_function():
    data, label = L.DummyData(shape=[dict(dim=[2, 3]), dict(dim=[2])], ntop=2)
    assert isinstance(data, Top) and isinstance(label, Top) and data.fn is label.fn
    silence = L.Silence(data, label, ntop=0)
    assert isinstance(silence, Function)
    n = caffe.NetSpec()
    n.data, n.label = data, label
    n.silence = silence
    layers = n.to_proto().layer
    assert [layer.name for layer in layers] == ["data", "silence"]
    assert list(layers[1].bottom) == ["data", "label"] and not layers[1].top
    assert [list(s.dim) for s in layers[0].dummy_data_param.shape] == [[2, 3], [2]]
    # A top-less function without a NetSpec name gets an automatic one.
    net = caffe.to_proto(data)
    assert net.layer[0].name == "DummyData1"


def test_in_place_and_name_override():
    n = caffe.NetSpec()
    n.data = L.Input(shape=dict(dim=[1, 2]))
    n.relu = L.ReLU(n.data, in_place=True)
    n.scaled = L.Power(n.relu, scale=2.0, name="doubler")
    layers = n.to_proto().layer
    assert (layers[1].name, list(layers[1].bottom), list(layers[1].top)) == (
        "relu",
        ["data"],
        ["data"],
    )
    assert (layers[2].name, list(layers[2].bottom), list(layers[2].top)) == (
        "doubler",
        ["data"],
        ["scaled"],
    )


def test_keyword_routing():
    n = caffe.NetSpec()
    n.data = L.Input(shape=dict(dim=[1, 3, 8, 8]))
    n.conv = L.Convolution(
        n.data,
        num_output=4,
        kernel_size=3,
        pad=[1],
        param=[dict(lr_mult=1), dict(lr_mult=2)],
        weight_filler=dict(type="gaussian", std=0.1),
        loss_weight=0.5,
        include=[dict(phase=caffe.TRAIN), dict(stage=["a", "b"])],
    )
    n.pool = L.Pooling(n.conv, pool="AVE", global_pooling=True)
    n.top5 = L.Accuracy(n.pool, n.data, top_k=5)
    layers = {layer.name: layer for layer in n.to_proto().layer}
    conv = layers["conv"]
    # A scalar for a repeated field is wrapped; other keys go to convolution_param...
    assert list(conv.convolution_param.kernel_size) == [3]
    assert list(conv.convolution_param.pad) == [1]
    assert conv.convolution_param.weight_filler.std == pytest.approx(0.1)
    # ...unless it has no such field: then the LayerParameter takes it.
    assert list(conv.loss_weight) == [0.5]
    assert [p.lr_mult for p in conv.param] == [1, 2]
    assert conv.include[0].phase == caffe.TRAIN and list(conv.include[1].stage) == ["a", "b"]
    assert layers["pool"].pooling_param.pool == caffe_pb2.PoolingParameter.AVE
    assert layers["top5"].accuracy_param.top_k == 5


def test_params_are_the_enum_values():
    assert P.Pooling.MAX == caffe_pb2.PoolingParameter.MAX
    assert P.Pooling.STOCHASTIC == caffe_pb2.PoolingParameter.STOCHASTIC
    assert P.Data.LMDB == caffe_pb2.DataParameter.LMDB
    assert P.LRN.WITHIN_CHANNEL == caffe_pb2.LRNParameter.WITHIN_CHANNEL
    with pytest.raises(AttributeError):
        _ = P.NoSuchLayer
    with pytest.raises(AttributeError):
        _ = P.Pooling.NO_SUCH_METHOD


def test_param_message_lookup_is_by_class_name():
    names = param_name_dict()
    assert names["Convolution"] == "convolution"
    assert names["InnerProduct"] == "inner_product"
    assert names["LRN"] == "lrn"
    assert names["HDF5Data"] == "hdf5_data"
    assert "Deconvolution" not in names  # shares ConvolutionParameter


def test_types_sharing_a_message_take_its_fields_flat():
    data = L.Input(shape=dict(dim=[1, 1, 4, 4]))
    flat = caffe.to_proto(L.Deconvolution(data, kernel_size=2, stride=2, num_output=1))
    nested = caffe.to_proto(
        L.Deconvolution(data, convolution_param=dict(kernel_size=2, stride=2, num_output=1))
    )
    assert flat == nested
    assert list(flat.layer[1].convolution_param.kernel_size) == [2]
    assert flat.layer[1].convolution_param.num_output == 1
    assert SHARED_PARAM_NAMES == {
        "Deconvolution": "convolution",
        "Im2col": "convolution",
        "LSTM": "recurrent",
        "RNN": "recurrent",
    }
    im2col = caffe.to_proto(L.Im2col(data, kernel_size=3, loss_weight=0)).layer[1]
    assert list(im2col.convolution_param.kernel_size) == [3] and list(im2col.loss_weight) == [0]
    lstm = caffe.to_proto(L.LSTM(data, data, num_output=7)).layer[1]
    assert lstm.recurrent_param.num_output == 7
    with pytest.raises(AttributeError, match=r"Deconvolution layer .*'kernal_size'"):
        caffe.to_proto(L.Deconvolution(data, kernal_size=2))


def test_unknown_fields_name_the_layer_and_field():
    data = L.Input(shape=dict(dim=[1]))
    with pytest.raises(AttributeError, match=r"Convolution layer 'Convolution1'.*'kernal_size'"):
        caffe.to_proto(L.Convolution(data, kernal_size=3))
    with pytest.raises(AttributeError, match="FillerParameter has no field named 'typ'"):
        caffe.to_proto(L.Convolution(data, weight_filler=dict(typ="xavier")))


def test_inputs_must_be_tops():
    with pytest.raises(TypeError, match=r"ReLU input 1 is not a Top \(type is <class 'str'>\)"):
        L.ReLU(L.Input(shape=dict(dim=[1])), "data")


def test_netspec_item_and_attribute_access():
    n = caffe.NetSpec()
    n["conv1/3x3"] = L.Input(shape=dict(dim=[1]))
    n.other = n["conv1/3x3"]
    assert n.keys() == ["conv1/3x3", "other"]
    assert n.other is n["conv1/3x3"]
    with pytest.raises(AttributeError):
        _ = n.missing
    with pytest.raises(KeyError):
        _ = n["missing"]
    del n.other
    assert n.keys() == ["conv1/3x3"]


def test_caffe_layers_package_forwards_to_net_spec():
    from caffe.net_spec import layers as net_spec_layers

    assert caffe.layers.Convolution.__name__ == "Convolution"
    assert L is caffe.layers  # the package of built-in layer modules...
    assert caffe.layers.relu.__name__ == "caffe.layers.relu"  # ...which still holds them
    assert net_spec_layers.ReLU.__name__ == "ReLU"


def test_a_generated_net_builds_and_runs():
    n = caffe.NetSpec()
    n.data = L.Input(shape=dict(dim=[2, 3]))
    n.ip = L.InnerProduct(
        n.data,
        num_output=2,
        weight_filler=dict(type="constant", value=1),
        bias_filler=dict(type="constant", value=0.5),
    )
    n.prob = L.Softmax(n.ip)
    net = caffe.Net(n.to_proto(), caffe.TEST)
    out = net.forward(data=np.ones((2, 3), np.float32))
    np.testing.assert_allclose(out["prob"], np.full((2, 2), 0.5), rtol=1e-6)
