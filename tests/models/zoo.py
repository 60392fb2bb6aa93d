"""The model zoo as the tests see it: paths, parsed prototxts, and stand-in datasets."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format

import caffe
from caffe.data.db import open_db_writer
from caffe.formats.proto_io import write_blobproto
from caffe.proto import caffe_pb2
from models.generate import ZOO, ZooModel

REPO_ROOT = Path(__file__).resolve().parents[2]
MODELS_DIR = REPO_ROOT / "models"
MODEL_NAMES = [model.name for model in ZOO]
ZOO_BY_NAME = {model.name: model for model in ZOO}


def model_file(name: str, file: str) -> Path:
    return MODELS_DIR / name / file


def read_net(name: str, file: str = "train_val.prototxt") -> caffe_pb2.NetParameter:
    return text_format.Parse(model_file(name, file).read_text(), caffe_pb2.NetParameter())


def layers_of(net: caffe_pb2.NetParameter, layer_type: str) -> list[caffe_pb2.LayerParameter]:
    return [layer for layer in net.layer if layer.type == layer_type]


def type_counts(net: caffe_pb2.NetParameter) -> Counter:
    return Counter(layer.type for layer in net.layer)


def require_registered(net: caffe_pb2.NetParameter) -> None:
    """Skip, naming them, while layer types the net uses are not registered yet."""
    missing = sorted({layer.type for layer in net.layer} - set(caffe.layer_type_list()))
    if missing:
        pytest.skip(f"layer types not registered yet: {', '.join(missing)}")


def write_stand_in_data(root: Path, model: ZooModel, net: caffe_pb2.NetParameter) -> None:
    """Under `root`, the LMDBs and mean files that `net`'s Data layers name: two random
    items of the model's input shape each (enough to build the net and run batches)."""
    channels, height, width = model.input_chw
    rng = np.random.default_rng(0)
    for layer in layers_of(net, "Data"):
        source = root / layer.data_param.source
        if not source.exists():
            source.parent.mkdir(parents=True, exist_ok=True)
            with open_db_writer(str(source)) as writer:
                for key in range(2):
                    pixels = rng.integers(0, 256, (channels, height, width), dtype=np.uint8)
                    datum = caffe_pb2.Datum(
                        channels=channels,
                        height=height,
                        width=width,
                        data=pixels.tobytes(),
                        label=key,
                    )
                    writer.put(f"{key:08d}".encode(), datum.SerializeToString())
        mean_file = layer.transform_param.mean_file
        if mean_file and not (root / mean_file).exists():
            (root / mean_file).parent.mkdir(parents=True, exist_ok=True)
            mean = np.full((1, channels, height, width), 128.0, np.float32)
            write_blobproto(os.fspath(root / mean_file), mean, legacy4d=True)
