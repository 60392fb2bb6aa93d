"""AlexNet (models/bvlc_alexnet) and CaffeNet (models/bvlc_reference_caffenet).

Both: 5 convolutions (conv1 11x11 stride 4; conv2, conv4, conv5 in 2 groups, the two-GPU
split of the original), LRN across 5 channels, MAX pooling 3/2, fc6/fc7 4096 with
Dropout 0.5, fc8 1000. CaffeNet pools before normalizing (AlexNet the other way round) and
starts the grouped layers' and fc6/fc7's biases at 1 instead of 0.1.
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
    lrn_across,
    max_pool,
    relu,
    train_data,
)

IMAGENET_MEAN_FILE = "data/ilsvrc12/imagenet_mean.binaryproto"


def data_spec() -> DataSpec:
    return DataSpec(
        train_source="examples/imagenet/ilsvrc12_train_lmdb",
        test_source="examples/imagenet/ilsvrc12_val_lmdb",
        train_batch=256,
        test_batch=50,
        channels=3,
        crop=227,
        transform=dict(mean_file=IMAGENET_MEAN_FILE),
    )


def _body(n: NetSpec, data: Top, caffenet: bool) -> Top:
    gaussian = dict(type="gaussian", std=0.01)
    grouped_bias = 1.0 if caffenet else 0.1
    n.conv1 = conv(data, 96, 11, stride=4, weight_filler=gaussian, bias=0.0)
    n.relu1 = relu(n.conv1)
    if caffenet:
        n.pool1 = max_pool(n.relu1, 3, 2)
        n.norm1 = lrn_across(n.pool1)
        stage1 = n.norm1
    else:
        n.norm1 = lrn_across(n.relu1)
        n.pool1 = max_pool(n.norm1, 3, 2)
        stage1 = n.pool1
    n.conv2 = conv(stage1, 256, 5, pad=2, group=2, weight_filler=gaussian, bias=grouped_bias)
    n.relu2 = relu(n.conv2)
    if caffenet:
        n.pool2 = max_pool(n.relu2, 3, 2)
        n.norm2 = lrn_across(n.pool2)
        stage2 = n.norm2
    else:
        n.norm2 = lrn_across(n.relu2)
        n.pool2 = max_pool(n.norm2, 3, 2)
        stage2 = n.pool2
    n.conv3 = conv(stage2, 384, 3, pad=1, weight_filler=gaussian, bias=0.0)
    n.relu3 = relu(n.conv3)
    n.conv4 = conv(n.relu3, 384, 3, pad=1, group=2, weight_filler=gaussian, bias=grouped_bias)
    n.relu4 = relu(n.conv4)
    n.conv5 = conv(n.relu4, 256, 3, pad=1, group=2, weight_filler=gaussian, bias=grouped_bias)
    n.relu5 = relu(n.conv5)
    n.pool5 = max_pool(n.relu5, 3, 2)
    n.fc6 = fc(n.pool5, 4096, dict(type="gaussian", std=0.005), bias=grouped_bias)
    n.relu6 = relu(n.fc6)
    n.drop6 = dropout(n.relu6, 0.5)
    n.fc7 = fc(n.drop6, 4096, dict(type="gaussian", std=0.005), bias=grouped_bias)
    n.relu7 = relu(n.fc7)
    n.drop7 = dropout(n.relu7, 0.5)
    n.fc8 = fc(n.drop7, 1000, gaussian, bias=0.0)
    return n.fc8


def _name(caffenet: bool) -> str:
    return "CaffeNet" if caffenet else "AlexNet"


def train_val(caffenet: bool) -> caffe_pb2.NetParameter:
    n = NetSpec()
    spec = data_spec()
    data, label = train_data(n, spec)
    scores = _body(n, data, caffenet)
    accuracy(n, "accuracy", scores, label)
    n.loss = L.SoftmaxWithLoss(scores, label)
    return finish_train_val(n, _name(caffenet), spec)


def deploy(caffenet: bool) -> caffe_pb2.NetParameter:
    n = NetSpec()
    scores = _body(n, deploy_input(n, 10, 3, 227), caffenet)
    n.prob = L.Softmax(scores)
    return finish_deploy(n, _name(caffenet))
