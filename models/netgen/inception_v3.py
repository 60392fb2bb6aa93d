"""Inception-v3 (Szegedy et al. 2015) in the layout of the TensorFlow-converted Caffe models.

Every convolution is conv (no bias) + BatchNorm (eps 0.001) + Scale + ReLU. A stem of five
convolutions and two MAX poolings takes 299x299 to 35x35; three 35x35 modules; a
reduction to 17x17; four 17x17 modules whose 7x7 convolutions are factorized into 1x7 and
7x1 (kernel_h/kernel_w, pad_h/pad_w); a reduction to 8x8; two 8x8 modules that fan out
into parallel 1x3 and 3x1 convolutions; global AVE pooling, Dropout and the classifier.
Each module's branches are joined by a Concat (11 in all).
"""

from __future__ import annotations

from functools import partial

from caffe.net_spec import L, NetSpec, Top
from caffe.proto import caffe_pb2
from models.netgen.blocks import (
    DataSpec,
    ave_pool,
    batch_norm_scale,
    classification_deploy,
    classification_train_val,
    conv,
    dropout,
    fc,
    imagenet_data,
    max_pool,
    relu,
)

NAME = "Inception-v3"
BN_EPS = 0.001
# Widths of the 7x7-factorized branches of the four 17x17 modules.
WIDTHS_17 = [128, 160, 160, 192]


def data_spec() -> DataSpec:
    # Inputs scaled to [-1, 1] as the TensorFlow-trained weights expect. The 299x299 crops
    # need larger images than Caffe's 256x256 ImageNet LMDBs: build these with
    # convert_imageset --resize_height=320 --resize_width=320.
    return imagenet_data(
        train_batch=32,
        test_batch=25,
        crop=299,
        transform=dict(mean_value=[128, 128, 128], scale=0.0078125),
        lmdb="examples/imagenet/ilsvrc12_320",
    )


class _Builder:
    """Adds conv-BN-Scale-ReLU units to a NetSpec; `deploy` selects stored BN statistics."""

    def __init__(self, n: NetSpec, deploy: bool) -> None:
        self.n = n
        self.deploy = deploy

    def unit(self, bottom: Top, name: str, num_output: int, kernel, stride=1, pad=0) -> Top:
        n = self.n
        n[name] = conv(
            bottom,
            num_output,
            kernel,
            stride=stride,
            pad=pad,
            weight_filler=dict(type="xavier"),
            bias=None,
        )
        x = batch_norm_scale(n, n[name], name + "_bn", name + "_scale", self.deploy, eps=BN_EPS)
        n[name + "_relu"] = relu(x)
        return n[name + "_relu"]

    def concat(self, name: str, *branches: Top) -> Top:
        self.n[name] = L.Concat(*branches)
        return self.n[name]

    def pool(self, name: str, top: Top) -> Top:
        self.n[name] = top
        return top

    def stem(self, data: Top) -> Top:
        x = self.unit(data, "conv1_3x3_s2", 32, 3, stride=2)
        x = self.unit(x, "conv2_3x3_s1", 32, 3)
        x = self.unit(x, "conv3_3x3_s1", 64, 3, pad=1)
        x = self.pool("pool1_3x3_s2", max_pool(x, 3, 2))
        x = self.unit(x, "conv4_3x3_reduce", 80, 1)
        x = self.unit(x, "conv4_3x3", 192, 3)
        return self.pool("pool2_3x3_s2", max_pool(x, 3, 2))

    def module_35(self, x: Top, name: str, pool_proj: int) -> Top:
        b1 = self.unit(x, name + "_1x1", 64, 1)
        b5 = self.unit(x, name + "_5x5_reduce", 48, 1)
        b5 = self.unit(b5, name + "_5x5", 64, 5, pad=2)
        b3 = self.unit(x, name + "_3x3_reduce", 64, 1)
        b3 = self.unit(b3, name + "_3x3_1", 96, 3, pad=1)
        b3 = self.unit(b3, name + "_3x3_2", 96, 3, pad=1)
        bp = self.pool(name + "_pool", ave_pool(x, 3, 1, pad=1))
        bp = self.unit(bp, name + "_pool_proj", pool_proj, 1)
        return self.concat(name + "_output", b1, b5, b3, bp)

    def reduction_35_to_17(self, x: Top) -> Top:
        name = "reduction_a"
        b3 = self.unit(x, name + "_3x3", 384, 3, stride=2)
        bd = self.unit(x, name + "_3x3_2_reduce", 64, 1)
        bd = self.unit(bd, name + "_3x3_2", 96, 3, pad=1)
        bd = self.unit(bd, name + "_3x3_3", 96, 3, stride=2)
        bp = self.pool(name + "_pool", max_pool(x, 3, 2))
        return self.concat(name + "_concat", b3, bd, bp)

    def module_17(self, x: Top, name: str, width: int) -> Top:
        b1 = self.unit(x, name + "_1x1", 192, 1)
        b7 = self.unit(x, name + "_1x7_reduce", width, 1)
        b7 = self.unit(b7, name + "_1x7", width, (1, 7), pad=(0, 3))
        b7 = self.unit(b7, name + "_7x1", 192, (7, 1), pad=(3, 0))
        bd = self.unit(x, name + "_7x1_reduce", width, 1)
        bd = self.unit(bd, name + "_7x1_2", width, (7, 1), pad=(3, 0))
        bd = self.unit(bd, name + "_1x7_2", width, (1, 7), pad=(0, 3))
        bd = self.unit(bd, name + "_7x1_3", width, (7, 1), pad=(3, 0))
        bd = self.unit(bd, name + "_1x7_3", 192, (1, 7), pad=(0, 3))
        bp = self.pool(name + "_pool", ave_pool(x, 3, 1, pad=1))
        bp = self.unit(bp, name + "_pool_proj", 192, 1)
        return self.concat(name + "_output", b1, b7, bd, bp)

    def reduction_17_to_8(self, x: Top) -> Top:
        name = "reduction_b"
        b3 = self.unit(x, name + "_3x3_reduce", 192, 1)
        b3 = self.unit(b3, name + "_3x3", 320, 3, stride=2)
        b7 = self.unit(x, name + "_1x7_reduce", 192, 1)
        b7 = self.unit(b7, name + "_1x7", 192, (1, 7), pad=(0, 3))
        b7 = self.unit(b7, name + "_7x1", 192, (7, 1), pad=(3, 0))
        b7 = self.unit(b7, name + "_3x3_2", 192, 3, stride=2)
        bp = self.pool(name + "_pool", max_pool(x, 3, 2))
        return self.concat(name + "_concat", b3, b7, bp)

    def module_8(self, x: Top, name: str) -> Top:
        b1 = self.unit(x, name + "_1x1", 320, 1)
        b3 = self.unit(x, name + "_1x3_reduce", 384, 1)
        b3a = self.unit(b3, name + "_1x3", 384, (1, 3), pad=(0, 1))
        b3b = self.unit(b3, name + "_3x1", 384, (3, 1), pad=(1, 0))
        bd = self.unit(x, name + "_3x3_reduce", 448, 1)
        bd = self.unit(bd, name + "_3x3", 384, 3, pad=1)
        bda = self.unit(bd, name + "_1x3_2", 384, (1, 3), pad=(0, 1))
        bdb = self.unit(bd, name + "_3x1_2", 384, (3, 1), pad=(1, 0))
        bp = self.pool(name + "_pool", ave_pool(x, 3, 1, pad=1))
        bp = self.unit(bp, name + "_pool_proj", 192, 1)
        return self.concat(name + "_output", b1, b3a, b3b, bda, bdb, bp)

    def body(self, data: Top) -> Top:
        x = self.stem(data)
        for i, pool_proj in enumerate([32, 64, 64], start=1):
            x = self.module_35(x, f"inception_a{i}", pool_proj)
        x = self.reduction_35_to_17(x)
        for i, width in enumerate(WIDTHS_17, start=1):
            x = self.module_17(x, f"inception_b{i}", width)
        x = self.reduction_17_to_8(x)
        for i in (1, 2):
            x = self.module_8(x, f"inception_c{i}")
        n = self.n
        n.pool_8x8_s1 = L.Pooling(x, pool=caffe_pb2.PoolingParameter.AVE, global_pooling=True)
        n.pool_8x8_s1_drop = dropout(n.pool_8x8_s1, 0.2)
        n.classifier = fc(n.pool_8x8_s1_drop, 1000, dict(type="xavier"), bias=0.0)
        return n.classifier


def _body(n: NetSpec, data: Top, deploy: bool) -> Top:
    return _Builder(n, deploy).body(data)


def train_val() -> caffe_pb2.NetParameter:
    return classification_train_val(NAME, data_spec(), partial(_body, deploy=False))


def deploy() -> caffe_pb2.NetParameter:
    return classification_deploy(NAME, 1, 299, partial(_body, deploy=True))
