"""VGG-16 and VGG-19 (Simonyan & Zisserman; the ILSVRC-2014 release) and VGG-19 with the
21,841 classes of ImageNet-22k, the Poseidon paper's largest model.

Five stages of 3x3 convolutions (pad 1) with ReLU, each closed by MAX pooling 2/2, then
fc6/fc7 4096 with Dropout 0.5 and the classifier fc8.
"""

from __future__ import annotations

from caffe.net_spec import L, NetSpec, Top
from caffe.proto import caffe_pb2
from models.netgen.blocks import (
    DataSpec,
    accuracy,
    conv,
    deploy_input,
    dropout,
    fc,
    finish_deploy,
    finish_train_val,
    max_pool,
    relu,
    train_data,
)

# Convolutions per stage and their widths.
STAGE_WIDTHS = [64, 128, 256, 512, 512]
STAGE_DEPTHS = {16: [2, 2, 3, 3, 3], 19: [2, 2, 4, 4, 4]}
# The mean pixel of the ILSVRC-2012 training set, BGR, as published with the models.
MEAN_BGR = [103.939, 116.779, 123.68]
IMAGENET_22K_CLASSES = 21841


def data_spec(num_classes: int) -> DataSpec:
    folder, db = ("imagenet", "ilsvrc12") if num_classes == 1000 else ("imagenet22k", "imagenet22k")
    return DataSpec(
        train_source=f"examples/{folder}/{db}_train_lmdb",
        test_source=f"examples/{folder}/{db}_val_lmdb",
        train_batch=64,
        test_batch=50,
        channels=3,
        crop=224,
        transform=dict(mean_value=MEAN_BGR),
    )


def net_name(depth: int, num_classes: int) -> str:
    return f"VGG_ILSVRC_{depth}_layers" + ("" if num_classes == 1000 else "_22k")


def _body(n: NetSpec, data: Top, depth: int, num_classes: int) -> Top:
    x = data
    for stage, (width, count) in enumerate(zip(STAGE_WIDTHS, STAGE_DEPTHS[depth]), start=1):
        for k in range(1, count + 1):
            n[f"conv{stage}_{k}"] = conv(x, width, 3, pad=1, bias=0.0)
            n[f"relu{stage}_{k}"] = relu(n[f"conv{stage}_{k}"])
            x = n[f"relu{stage}_{k}"]
        n[f"pool{stage}"] = max_pool(x, 2, 2)
        x = n[f"pool{stage}"]
    gaussian = dict(type="gaussian", std=0.005)
    n.fc6 = fc(x, 4096, gaussian, bias=0.1)
    n.relu6 = relu(n.fc6)
    n.drop6 = dropout(n.relu6, 0.5)
    n.fc7 = fc(n.drop6, 4096, gaussian, bias=0.1)
    n.relu7 = relu(n.fc7)
    n.drop7 = dropout(n.relu7, 0.5)
    n.fc8 = fc(n.drop7, num_classes, dict(type="gaussian", std=0.01), bias=0.0)
    return n.fc8


def train_val(depth: int, num_classes: int = 1000) -> caffe_pb2.NetParameter:
    n = NetSpec()
    spec = data_spec(num_classes)
    data, label = train_data(n, spec)
    scores = _body(n, data, depth, num_classes)
    accuracy(n, "accuracy", scores, label)
    accuracy(n, "accuracy_top5", scores, label, top_k=5)
    n.loss = L.SoftmaxWithLoss(scores, label)
    return finish_train_val(n, net_name(depth, num_classes), spec)


def deploy(depth: int, num_classes: int = 1000) -> caffe_pb2.NetParameter:
    n = NetSpec()
    scores = _body(n, deploy_input(n, 10, 3, 224), depth, num_classes)
    n.prob = L.Softmax(scores)
    return finish_deploy(n, net_name(depth, num_classes))
