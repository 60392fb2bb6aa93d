"""GoogLeNet (models/bvlc_googlenet): nine inception modules (four branches joined by a
Concat), two auxiliary classifiers during training whose losses weigh 0.3, top-1 and top-5
Accuracy at each of the three heads, and ceil-mode pooling (112 -> 56 after pool1)."""

from __future__ import annotations

from functools import partial

from caffe.net_spec import L, NetSpec, Top
from caffe.proto import caffe_pb2
from models.netgen.blocks import (
    DataSpec,
    accuracy,
    ave_pool,
    classification_deploy,
    conv_relu,
    dropout,
    fc,
    finish_train_val,
    imagenet_data,
    lrn_across,
    max_pool,
    relu,
    train_data,
)

NAME = "GoogleNet"
XAVIER = dict(type="xavier")

# (name, #1x1, #3x3 reduce, #3x3, #5x5 reduce, #5x5, #pool proj), in network order; a
# max pooling 3/2 follows 3b and 4e.
INCEPTIONS = [
    ("inception_3a", 64, 96, 128, 16, 32, 32),
    ("inception_3b", 128, 128, 192, 32, 96, 64),
    ("inception_4a", 192, 96, 208, 16, 48, 64),
    ("inception_4b", 160, 112, 224, 24, 64, 64),
    ("inception_4c", 128, 128, 256, 24, 64, 64),
    ("inception_4d", 112, 144, 288, 32, 64, 64),
    ("inception_4e", 256, 160, 320, 32, 128, 128),
    ("inception_5a", 256, 160, 320, 32, 128, 128),
    ("inception_5b", 384, 192, 384, 48, 128, 128),
]
POOL_AFTER = {"inception_3b": "pool3/3x3_s2", "inception_4e": "pool4/3x3_s2"}
# Auxiliary classifiers hang off these modules' outputs.
AUX_HEADS = {"inception_4a": "loss1", "inception_4d": "loss2"}


def data_spec() -> DataSpec:
    return imagenet_data(train_batch=32, crop=224, transform=dict(mean_value=[104, 117, 123]))


def _conv_relu(n: NetSpec, bottom: Top, name: str, relu_name: str, *args, **kwargs) -> Top:
    return conv_relu(n, bottom, name, relu_name, *args, weight_filler=XAVIER, bias=0.2, **kwargs)


def _inception(n: NetSpec, bottom: Top, name: str, *widths: int) -> Top:
    n1, n3r, n3, n5r, n5, npp = widths
    p = name + "/"
    b1 = _conv_relu(n, bottom, p + "1x1", p + "relu_1x1", n1, 1)
    b3 = _conv_relu(n, bottom, p + "3x3_reduce", p + "relu_3x3_reduce", n3r, 1)
    b3 = _conv_relu(n, b3, p + "3x3", p + "relu_3x3", n3, 3, pad=1)
    b5 = _conv_relu(n, bottom, p + "5x5_reduce", p + "relu_5x5_reduce", n5r, 1)
    b5 = _conv_relu(n, b5, p + "5x5", p + "relu_5x5", n5, 5, pad=2)
    n[p + "pool"] = max_pool(bottom, 3, 1, pad=1)
    bp = _conv_relu(n, n[p + "pool"], p + "pool_proj", p + "relu_pool_proj", npp, 1)
    n[p + "output"] = L.Concat(b1, b3, b5, bp)
    return n[p + "output"]


def _classifier_loss(n: NetSpec, head: str, scores: Top, label: Top, weight: float) -> None:
    """SoftmaxWithLoss weighted `weight` plus top-1/top-5 Accuracy (TEST) for one head.

    Upstream names the auxiliary loss layers "lossK/loss" but their tops "lossK/loss1".
    """
    top = head + ("/loss3" if head == "loss3" else "/loss1")
    extra = {} if head == "loss3" else dict(name=head + "/loss")
    n[top] = L.SoftmaxWithLoss(scores, label, loss_weight=weight, **extra)
    accuracy(n, head + "/top-1", scores, label)
    accuracy(n, head + "/top-5", scores, label, top_k=5)


def _aux_head(n: NetSpec, bottom: Top, head: str, label: Top) -> None:
    p = head + "/"
    n[p + "ave_pool"] = ave_pool(bottom, 5, 3)
    x = _conv_relu(n, n[p + "ave_pool"], p + "conv", p + "relu_conv", 128, 1)
    n[p + "fc"] = fc(x, 1024, XAVIER, bias=0.2)
    n[p + "relu_fc"] = relu(n[p + "fc"])
    n[p + "drop_fc"] = dropout(n[p + "relu_fc"], 0.7)
    n[p + "classifier"] = fc(n[p + "drop_fc"], 1000, XAVIER, bias=0.0)
    _classifier_loss(n, head, n[p + "classifier"], label, 0.3)


def _body(n: NetSpec, data: Top, label: Top | None) -> Top:
    """The trunk up to loss3/classifier; with a label, also the two auxiliary heads."""
    x = _conv_relu(n, data, "conv1/7x7_s2", "conv1/relu_7x7", 64, 7, stride=2, pad=3)
    n["pool1/3x3_s2"] = max_pool(x, 3, 2)
    n["pool1/norm1"] = lrn_across(n["pool1/3x3_s2"])
    x = _conv_relu(n, n["pool1/norm1"], "conv2/3x3_reduce", "conv2/relu_3x3_reduce", 64, 1)
    x = _conv_relu(n, x, "conv2/3x3", "conv2/relu_3x3", 192, 3, pad=1)
    n["conv2/norm2"] = lrn_across(x)
    n["pool2/3x3_s2"] = max_pool(n["conv2/norm2"], 3, 2)
    x = n["pool2/3x3_s2"]
    for name, *widths in INCEPTIONS:
        x = _inception(n, x, name, *widths)
        if label is not None and name in AUX_HEADS:
            _aux_head(n, x, AUX_HEADS[name], label)
        if name in POOL_AFTER:
            n[POOL_AFTER[name]] = max_pool(x, 3, 2)
            x = n[POOL_AFTER[name]]
    n["pool5/7x7_s1"] = ave_pool(x, 7, 1)
    n["pool5/drop_7x7_s1"] = dropout(n["pool5/7x7_s1"], 0.4)
    n["loss3/classifier"] = fc(n["pool5/drop_7x7_s1"], 1000, XAVIER, bias=0.0)
    return n["loss3/classifier"]


def train_val() -> caffe_pb2.NetParameter:
    n = NetSpec()
    spec = data_spec()
    data, label = train_data(n, spec)
    scores = _body(n, data, label)
    _classifier_loss(n, "loss3", scores, label, 1.0)
    return finish_train_val(n, NAME, spec)


def deploy() -> caffe_pb2.NetParameter:
    return classification_deploy(NAME, 10, 224, partial(_body, label=None))
