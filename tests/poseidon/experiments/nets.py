"""Small nets the profile tests build: prototxt text, and a quiet way to build it."""

from __future__ import annotations

from pathlib import Path

import caffe
from poseidon.experiments.profile_measure import build_net

REPO_ROOT = Path(__file__).resolve().parents[3]
CIFAR10_QUICK = REPO_ROOT / "models" / "cifar10_quick" / "train_val_dummy.prototxt"

# conv1 reads the data (no dX); conv2 has group 2 and stride 2; fc learns; fc_frozen has
# lr_mult 0 on both blobs (no dW, no bias sum); relu is in place.
SMALL = """
name: "small"
layer { name: "data" type: "DummyData" top: "data" top: "label"
        dummy_data_param { shape { dim: 4 dim: 3 dim: 9 dim: 9 } shape { dim: 4 }
                           data_filler { type: "gaussian" } data_filler { type: "constant" } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 8 kernel_size: 3 weight_filler { type: "xavier" } } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "conv2" type: "Convolution" bottom: "conv1" top: "conv2"
        convolution_param { num_output: 6 kernel_size: 3 stride: 2 group: 2
                            weight_filler { type: "xavier" } } }
layer { name: "pool" type: "Pooling" bottom: "conv2" top: "pool"
        pooling_param { pool: AVE kernel_size: 2 stride: 1 } }
layer { name: "fc" type: "InnerProduct" bottom: "pool" top: "fc"
        inner_product_param { num_output: 5 weight_filler { type: "xavier" } } }
layer { name: "fc_frozen" type: "InnerProduct" bottom: "fc" top: "scores"
        param { lr_mult: 0 } param { lr_mult: 0 }
        inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "scores" bottom: "label" top: "loss" }
"""


def build(tmp_path: Path, text: str = SMALL, batch: int | None = None) -> caffe.Net:
    path = tmp_path / "net.prototxt"
    path.write_text(text)
    return build_net(str(path), batch)
