"""Net(..., shapes_only=True) (Note [shapes only] in caffe/common.py): every blob and parameter
shape of the real net, no memory behind them, no filler drawn, and data layers that read at
most their first record (or, with no data, say so naming the layer)."""

from __future__ import annotations

import logging

import pytest
import torch

import caffe
from caffe.errors import InputShapeError, NetError
from caffe.parallel.layout import sync_layout
from tests.caffe.data_fixtures import net_param, write_indexed_db

NET = """
name: "shapes"
layer { name: "in" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 4 dim: 3 dim: 8 dim: 8 } shape { dim: 4 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 5 kernel_size: 3 weight_filler { type: "gaussian" } } }
layer { name: "bn" type: "BatchNorm" bottom: "conv" top: "conv" }
layer { name: "scale" type: "Scale" bottom: "conv" top: "conv" scale_param { bias_term: true } }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "seq" type: "Reshape" bottom: "pool" top: "seq"
        reshape_param { shape { dim: 4 dim: 5 dim: -1 } } }
layer { name: "step" type: "InnerProduct" bottom: "seq" top: "step"
        param { name: "w" } param { name: "b" }
        inner_product_param { num_output: 9 axis: 2 weight_filler { type: "xavier" } } }
layer { name: "again" type: "InnerProduct" bottom: "seq" top: "again"
        param { name: "w" } param { name: "b" }
        inner_product_param { num_output: 9 axis: 2 } }
layer { name: "sum" type: "Eltwise" bottom: "step" bottom: "again" top: "sum" }
layer { name: "ip" type: "InnerProduct" bottom: "sum" top: "ip"
        param { lr_mult: 0 } param { lr_mult: 0 } inner_product_param { num_output: 6 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""


def shapes(net: caffe.Net) -> tuple[dict, list]:
    blobs = {name: blob.shape for name, blob in net.blobs.items()}
    params = [[b.shape for b in layer.blobs] for layer in net.layers]
    return blobs, params


def test_the_real_nets_shapes_and_no_memory() -> None:
    real = caffe.Net(net_param(NET))
    rng = torch.random.get_rng_state()
    net = caffe.Net(net_param(NET), shapes_only=True)
    assert torch.equal(rng, torch.random.get_rng_state())  # no filler drew a number
    assert shapes(net) == shapes(real)
    assert net.layer_param_range == real.layer_param_range
    # Shared, frozen and axis-2 layers as the real net sees them (caffe/parallel/layout.py).
    assert sync_layout(net) == sync_layout(real)
    assert (
        net.param_data.device.type == "meta" and net.param_data.numel() == real.param_data.numel()
    )
    assert all(blob.data_tensor.is_meta for blob in net.blobs.values())


def test_shapes_only_refuses_weights(tmp_path) -> None:
    path = tmp_path / "net.prototxt"
    path.write_text(NET)
    with pytest.raises(NetError, match="shapes-only net holds no values"):
        caffe.Net(str(path), caffe.TRAIN, weights=str(tmp_path / "w.caffemodel"), shapes_only=True)


DATA = """
layer {{ name: "data" type: "Data" top: "data" top: "label"
        transform_param {{ {transform} }}
        data_param {{ source: "{source}" batch_size: 6 backend: LMDB }} }}
"""


def test_a_data_layer_reads_its_first_record_only(tmp_path) -> None:
    write_indexed_db(tmp_path / "db", 3, shape=(2, 4, 5))
    text = DATA.format(transform="crop_size: 3", source=tmp_path / "db")
    net = caffe.Net(net_param(text), shapes_only=True)
    assert shapes(net) == shapes(caffe.Net(net_param(text)))
    assert net.blobs["data"].shape == [6, 2, 3, 3] and net.blobs["label"].shape == [6]
    assert net.layers[0].prefetcher is None  # nothing loads batches


@pytest.mark.parametrize(
    ("transform", "channels", "guessed"),
    [("crop_size: 7 mean_value: 1 mean_value: 2 mean_value: 3", 3, False),
     ("crop_size: 7 force_gray: true", 1, False), ("crop_size: 7 mean_value: 1", 3, True)],
)  # fmt: skip
def test_a_data_layer_without_its_data(tmp_path, caplog, transform, channels, guessed) -> None:
    text = DATA.format(transform=transform, source=tmp_path / "missing")
    with caplog.at_level(logging.WARNING, logger="caffe"):
        net = caffe.Net(net_param(text), shapes_only=True)
    assert net.blobs["data"].shape == [6, channels, 7, 7] and net.blobs["label"].shape == [6]
    # Three channels are a guess unless the mean values or force_gray say how many.
    assert ("taken to have 3 channels" in caplog.text) == guessed


def test_nothing_says_the_shape(tmp_path) -> None:
    text = DATA.format(transform="mirror: true", source=tmp_path / "missing")
    with pytest.raises(InputShapeError, match=r"Layer 'data' \(type Data\).*no crop_size") as e:
        caffe.Net(net_param(text), shapes_only=True)
    assert e.value.tops == ["data", "label"]
    images = """layer { name: "images" type: "ImageData" top: "data" top: "label"
                image_data_param { source: "%s" batch_size: 2 } }""" % (tmp_path / "list.txt")
    with pytest.raises(InputShapeError, match=r"Layer 'images' \(type ImageData\)") as e:
        caffe.Net(net_param(images), shapes_only=True)
    assert e.value.tops == ["data", "label"]
