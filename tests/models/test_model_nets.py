"""Every model's train_val builds as a Net in TRAIN and TEST, and its deploy net in TEST,
with the blob shapes its architecture implies."""

import gc

import pytest

import caffe
from caffe.proto import caffe_pb2
from tests.models.zoo import (
    MODEL_NAMES,
    ZOO_BY_NAME,
    layers_of,
    read_net,
    require_registered,
)

CLASSES = {
    name: 10 if name in ("lenet", "cifar10_quick", "cifar10_full") else 1000 for name in MODEL_NAMES
} | {"vgg19_22k": 21841}


def build(param: caffe_pb2.NetParameter, phase: int) -> caffe.Net:
    copy = caffe_pb2.NetParameter()
    copy.CopyFrom(param)
    return caffe.Net(copy, phase)


def score_blob(net: caffe.Net, deploy: bool) -> str:
    """The classifier's output: the bottom of the Softmax (deploy) or of the last loss."""
    kind = "Softmax" if deploy else "SoftmaxWithLoss"
    layer = [layer for layer in net.param.layer if layer.type == kind][-1]
    return layer.bottom[0]


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_train_val_builds_in_train_and_test(name, zoo_data_root, monkeypatch):
    param = read_net(name)
    require_registered(param)
    monkeypatch.chdir(zoo_data_root)  # the LMDB paths are relative, as in Caffe's examples
    # Small batches: the architecture is under test, not the batch size.
    for layer in layers_of(param, "Data"):
        layer.data_param.batch_size = 2
    accuracies = sorted(layer.top[0] for layer in layers_of(param, "Accuracy"))
    losses = sorted(layer.top[0] for layer in layers_of(param, "SoftmaxWithLoss"))
    for phase, outputs in ((caffe.TRAIN, losses), (caffe.TEST, sorted(accuracies + losses))):
        net = build(param, phase)
        assert net.outputs == outputs
        assert net.blobs["data"].shape == [2, *ZOO_BY_NAME[name].input_chw]
        assert net.blobs[score_blob(net, deploy=False)].shape == [2, CLASSES[name]]
        if name in ("lenet", "cifar10_quick", "cifar10_full"):
            result = net.forward()  # small enough to run through the real Data layer
            assert set(result) == set(outputs)
        del net
        gc.collect()


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_deploy_builds_with_class_probabilities(name):
    param = read_net(name, "deploy.prototxt")
    require_registered(param)
    net = build(param, caffe.TEST)
    batch = param.layer[0].input_param.shape[0].dim[0]
    assert net.inputs == ["data"]
    assert net.outputs == ["prob"]
    assert net.blobs["prob"].shape == [batch, CLASSES[name]]
    del net
    gc.collect()
