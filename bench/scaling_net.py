"""The network of bench/scaling.py, once as a Caffe prototxt and once in torch.nn: an
FC-heavy VGG-like net sized for a 2-core machine (two 3×3 conv blocks, then fully
connected 4096→1024→1024→100; 5.4 M parameters, 94% of them in the FC layers)."""

from __future__ import annotations

from torch import nn

INPUT = (3, 32, 32)
CLASSES = 100


def prototxt(batch: int) -> str:
    def conv(name: str, bottom: str, out: int) -> str:
        return f"""
layer {{ name: "{name}" type: "Convolution" bottom: "{bottom}" top: "{name}"
  convolution_param {{ num_output: {out} kernel_size: 3 pad: 1
                      weight_filler {{ type: "msra" }} }} }}
layer {{ name: "{name}_relu" type: "ReLU" bottom: "{name}" top: "{name}" }}
layer {{ name: "{name}_pool" type: "Pooling" bottom: "{name}" top: "{name}_pool"
  pooling_param {{ pool: MAX kernel_size: 2 stride: 2 }} }}"""

    def fc(name: str, bottom: str, out: int, relu: bool = True) -> str:
        text = f"""
layer {{ name: "{name}" type: "InnerProduct" bottom: "{bottom}" top: "{name}"
  inner_product_param {{ num_output: {out} weight_filler {{ type: "xavier" }} }} }}"""
        if relu:
            text += f"""
layer {{ name: "{name}_relu" type: "ReLU" bottom: "{name}" top: "{name}" }}"""
        return text

    c, h, w = INPUT
    return f"""name: "vgg_like_fc"
layer {{ name: "data" type: "DummyData" top: "data" top: "label"
  dummy_data_param {{ shape {{ dim: {batch} dim: {c} dim: {h} dim: {w} }} shape {{ dim: {batch} }}
    data_filler {{ type: "constant" value: 0.5 }} data_filler {{ type: "constant" value: 3 }} }} }}
{conv("conv1", "data", 32)}{conv("conv2", "conv1_pool", 64)}
{fc("fc6", "conv2_pool", 1024)}{fc("fc7", "fc6", 1024)}{fc("fc8", "fc7", CLASSES, relu=False)}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "fc8" bottom: "label" top: "loss" }}
"""


def torch_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(4096, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
        nn.Linear(1024, CLASSES),
    )  # fmt: skip


SOLVER = """net: "{net}"
base_lr: 0.01
momentum: 0.9
weight_decay: 0.0005
lr_policy: "fixed"
max_iter: 1000000
display: 0
snapshot: 0
snapshot_after_train: false
random_seed: 7
solver_mode: CPU
"""
