"""AlexNet (models/bvlc_alexnet) and CaffeNet (models/bvlc_reference_caffenet).

Both: 5 convolutions (conv1 11x11 stride 4; conv2, conv4, conv5 in 2 groups, the two-GPU
split of the original), LRN across 5 channels, MAX pooling 3/2, fc6/fc7 4096 with
Dropout 0.5, fc8 1000. CaffeNet pools before normalizing (AlexNet the other way round) and
starts the grouped layers' and fc6/fc7's biases at 1 instead of 0.1.
"""

from __future__ import annotations

from functools import partial

from caffe.net_spec import NetSpec, Top
from caffe.proto import caffe_pb2
from models.netgen.blocks import (
    DataSpec,
    classification_deploy,
    classification_train_val,
    conv_relu,
    fc6_to_fc8,
    imagenet_data,
    lrn_across,
    max_pool,
)

IMAGENET_MEAN_FILE = "data/ilsvrc12/imagenet_mean.binaryproto"


def data_spec() -> DataSpec:
    return imagenet_data(train_batch=256, crop=227, transform=dict(mean_file=IMAGENET_MEAN_FILE))


def _pool_and_norm(n: NetSpec, bottom: Top, stage: int, caffenet: bool) -> Top:
    """MAX pooling 3/2 and LRN: CaffeNet pools first, AlexNet normalizes first."""
    pool, norm = f"pool{stage}", f"norm{stage}"
    if caffenet:
        n[pool] = max_pool(bottom, 3, 2)
        n[norm] = lrn_across(n[pool])
        return n[norm]
    n[norm] = lrn_across(bottom)
    n[pool] = max_pool(n[norm], 3, 2)
    return n[pool]


def _body(n: NetSpec, data: Top, caffenet: bool) -> Top:
    gaussian = dict(type="gaussian", std=0.01)
    grouped_bias = 1.0 if caffenet else 0.1
    grouped = dict(group=2, weight_filler=gaussian, bias=grouped_bias)
    x = conv_relu(n, data, "conv1", "relu1", 96, 11, stride=4, weight_filler=gaussian, bias=0.0)
    x = _pool_and_norm(n, x, 1, caffenet)
    x = conv_relu(n, x, "conv2", "relu2", 256, 5, pad=2, **grouped)
    x = _pool_and_norm(n, x, 2, caffenet)
    x = conv_relu(n, x, "conv3", "relu3", 384, 3, pad=1, weight_filler=gaussian, bias=0.0)
    x = conv_relu(n, x, "conv4", "relu4", 384, 3, pad=1, **grouped)
    x = conv_relu(n, x, "conv5", "relu5", 256, 3, pad=1, **grouped)
    n.pool5 = max_pool(x, 3, 2)
    return fc6_to_fc8(n, n.pool5, 1000, hidden_bias=grouped_bias)


def _name(caffenet: bool) -> str:
    return "CaffeNet" if caffenet else "AlexNet"


def train_val(caffenet: bool) -> caffe_pb2.NetParameter:
    body = partial(_body, caffenet=caffenet)
    return classification_train_val(_name(caffenet), data_spec(), body, top5=False)


def deploy(caffenet: bool) -> caffe_pb2.NetParameter:
    return classification_deploy(_name(caffenet), 10, 227, partial(_body, caffenet=caffenet))
