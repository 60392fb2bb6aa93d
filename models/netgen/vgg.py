"""VGG-16 and VGG-19 (Simonyan & Zisserman; the ILSVRC-2014 release) and VGG-19 with the
21,841 classes of ImageNet-22k, the Poseidon paper's largest model.

Five stages of 3x3 convolutions (pad 1) with ReLU, each closed by MAX pooling 2/2, then
fc6/fc7 4096 with Dropout 0.5 and the classifier fc8.
"""

from __future__ import annotations

from functools import partial

from caffe.net_spec import NetSpec, Top
from caffe.proto import caffe_pb2
from models.netgen.blocks import (
    ILSVRC12_LMDB,
    DataSpec,
    classification_deploy,
    classification_train_val,
    conv_relu,
    fc6_to_fc8,
    imagenet_data,
    max_pool,
)

# Convolutions per stage and their widths.
STAGE_WIDTHS = [64, 128, 256, 512, 512]
STAGE_DEPTHS = {16: [2, 2, 3, 3, 3], 19: [2, 2, 4, 4, 4]}
# The mean pixel of the ILSVRC-2012 training set, BGR, as published with the models.
MEAN_BGR = [103.939, 116.779, 123.68]
IMAGENET_22K_CLASSES = 21841


def data_spec(num_classes: int) -> DataSpec:
    lmdb = ILSVRC12_LMDB if num_classes == 1000 else "examples/imagenet22k/imagenet22k"
    return imagenet_data(train_batch=64, crop=224, transform=dict(mean_value=MEAN_BGR), lmdb=lmdb)


def net_name(depth: int, num_classes: int) -> str:
    return f"VGG_ILSVRC_{depth}_layers" + ("" if num_classes == 1000 else "_22k")


def _body(n: NetSpec, data: Top, depth: int, num_classes: int) -> Top:
    x = data
    for stage, (width, count) in enumerate(zip(STAGE_WIDTHS, STAGE_DEPTHS[depth]), start=1):
        for k in range(1, count + 1):
            x = conv_relu(n, x, f"conv{stage}_{k}", f"relu{stage}_{k}", width, 3, pad=1, bias=0.0)
        n[f"pool{stage}"] = max_pool(x, 2, 2)
        x = n[f"pool{stage}"]
    return fc6_to_fc8(n, x, num_classes, hidden_bias=0.1)


def train_val(depth: int, num_classes: int = 1000) -> caffe_pb2.NetParameter:
    body = partial(_body, depth=depth, num_classes=num_classes)
    return classification_train_val(net_name(depth, num_classes), data_spec(num_classes), body)


def deploy(depth: int, num_classes: int = 1000) -> caffe_pb2.NetParameter:
    body = partial(_body, depth=depth, num_classes=num_classes)
    return classification_deploy(net_name(depth, num_classes), 10, 224, body)
