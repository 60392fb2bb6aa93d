"""ResNet-50 and ResNet-152 (He et al. 2015; the layout of KaimingHe/deep-residual-networks).

conv1 7x7/2 and MAX pooling 3/2 (ceil: 112 -> 56), then 3, 4, 6 and 3 bottleneck blocks
(ResNet-152: 3, 8, 36 and 3):
1x1 -> 3x3 -> 1x1 (x4 widening) convolutions without bias, each followed by BatchNorm and
Scale in place (and ReLU, except the last), added to the shortcut by Eltwise SUM, then ReLU.
The first block of a stage projects the shortcut with a 1x1 convolution (stride 2 from
stage 3 on, on the branch's first 1x1 as in the released model). AVE pooling 7/1 and fc1000.
Blocks are named as in the released models: res2a, res2b, ... by letter, except that the
deeper nets number the long stages 3 and 4 after their first block (res4a, res4b1 ...
res4b35), since 36 blocks outrun the alphabet.
"""

from __future__ import annotations

import string
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
    fc,
    imagenet_data,
    max_pool,
    relu,
)

# depth -> (stage number, blocks, bottleneck width); the block output is 4x the width.
STAGES = {
    50: [(2, 3, 64), (3, 4, 128), (4, 6, 256), (5, 3, 512)],
    152: [(2, 3, 64), (3, 8, 128), (4, 36, 256), (5, 3, 512)],
}
MSRA = dict(type="msra")


def data_spec() -> DataSpec:
    return imagenet_data(train_batch=32, crop=224, transform=dict(mean_value=[104, 117, 123]))


def _conv_bn(
    n: NetSpec,
    bottom: Top,
    conv_name: str,
    suffix: str,
    num_output: int,
    kernel: int,
    stride: int = 1,
    pad: int = 0,
    with_relu: bool = True,
    deploy: bool = False,
) -> Top:
    """conv<suffix> + bn<suffix> + scale<suffix> (+ <conv>_relu), all but conv in place."""
    n[conv_name] = conv(
        bottom, num_output, kernel, stride=stride, pad=pad, weight_filler=MSRA, bias=None
    )
    x = batch_norm_scale(n, n[conv_name], "bn" + suffix, "scale" + suffix, deploy)
    if with_relu:
        n[conv_name + "_relu"] = relu(x)
        x = n[conv_name + "_relu"]
    return x


def _bottleneck(
    n: NetSpec, bottom: Top, name: str, width: int, first: bool, stride: int, deploy: bool
) -> Top:
    res = "res" + name
    if first:
        shortcut = _conv_bn(
            n,
            bottom,
            res + "_branch1",
            name + "_branch1",
            4 * width,
            1,
            stride=stride,
            with_relu=False,
            deploy=deploy,
        )
    else:
        shortcut = bottom
    x = _conv_bn(
        n, bottom, res + "_branch2a", name + "_branch2a", width, 1, stride=stride, deploy=deploy
    )
    x = _conv_bn(n, x, res + "_branch2b", name + "_branch2b", width, 3, pad=1, deploy=deploy)
    x = _conv_bn(
        n, x, res + "_branch2c", name + "_branch2c", 4 * width, 1, with_relu=False, deploy=deploy
    )
    n[res] = L.Eltwise(shortcut, x)  # operation SUM is the default
    n[res + "_relu"] = relu(n[res])
    return n[res + "_relu"]


def _block_name(depth: int, stage: int, b: int) -> str:
    if depth > 50 and stage in (3, 4) and b > 0:
        return f"{stage}b{b}"
    return f"{stage}{string.ascii_lowercase[b]}"


def _body(n: NetSpec, data: Top, deploy: bool, depth: int) -> Top:
    x = _conv_bn(n, data, "conv1", "_conv1", 64, 7, stride=2, pad=3, deploy=deploy)
    n.pool1 = max_pool(x, 3, 2)
    x = n.pool1
    for stage, blocks, width in _stages(depth):
        for b in range(blocks):
            stride = 2 if b == 0 and stage > 2 else 1
            name = _block_name(depth, stage, b)
            x = _bottleneck(n, x, name, width, first=b == 0, stride=stride, deploy=deploy)
    n.pool5 = ave_pool(x, 7, 1)
    n.fc1000 = fc(n.pool5, 1000, dict(type="gaussian", std=0.01), bias=0.0)
    return n.fc1000


def _stages(depth: int) -> list[tuple[int, int, int]]:
    if depth not in STAGES:
        raise ValueError(f"ResNet depth {depth}: want one of {', '.join(map(str, STAGES))}")
    return STAGES[depth]


def train_val(depth: int = 50) -> caffe_pb2.NetParameter:
    body = partial(_body, deploy=False, depth=depth)
    return classification_train_val(f"ResNet-{depth}", data_spec(), body)


def deploy(depth: int = 50) -> caffe_pb2.NetParameter:
    body = partial(_body, deploy=True, depth=depth)
    return classification_deploy(f"ResNet-{depth}", 1, 224, body)
