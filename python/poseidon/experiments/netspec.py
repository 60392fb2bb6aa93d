"""The batch of a net: read it from, or set it in, the layers that produce its data.

A profile holds per-layer times at one batch; an experiment runs a zoo net (whose
train_val_dummy.prototxt has a small batch) at the profile's batch. Both sides look at the
same layers: DummyData (every output's first axis), Input, and the database and file data
layers (batch_size).
"""

from __future__ import annotations

from typing import Any

from caffe.proto import caffe_pb2

BATCH_FIELDS = (
    "data_param",
    "image_data_param",
    "hdf5_data_param",
    "memory_data_param",
    "window_data_param",
)


class BatchError(ValueError):
    """The net has no layer whose batch can be read or set; the message names it."""


def data_batch(net: caffe_pb2.NetParameter, where: str = "") -> int:
    """The first axis of the first data layer's output."""
    for layer in net.layer:
        if layer.type == "DummyData":
            param = layer.dummy_data_param
            if param.shape:
                return int(param.shape[0].dim[0])
            if param.num:
                return int(param.num[0])
        if layer.type == "Input" and layer.input_param.shape:
            return int(layer.input_param.shape[0].dim[0])
        for field in BATCH_FIELDS:
            if layer.HasField(field):
                return int(getattr(layer, field).batch_size)
    raise BatchError(f"{where or net.name}: no data layer sets a batch size")


def set_batch(net: caffe_pb2.NetParameter, batch: int, where: str = "") -> None:
    """Make every data layer produce `batch` samples per pass (in place)."""
    if batch < 1:
        raise BatchError(f"{where or net.name}: batch {batch} (want >= 1)")
    changed = False
    for layer in net.layer:
        changed |= _set_layer_batch(layer, batch)
    if not changed:
        raise BatchError(
            f"{where or net.name}: no data layer (DummyData, Input, Data, ImageData, HDF5Data, "
            "MemoryData, WindowData) to set the batch of"
        )


def _set_layer_batch(layer: Any, batch: int) -> bool:
    if layer.type == "DummyData":
        param = layer.dummy_data_param
        for shape in param.shape:
            if shape.dim:
                shape.dim[0] = batch
        for index in range(len(param.num)):
            param.num[index] = batch
        return bool(param.shape) or bool(param.num)
    if layer.type == "Input":
        for shape in layer.input_param.shape:
            if shape.dim:
                shape.dim[0] = batch
        return bool(layer.input_param.shape)
    for field in BATCH_FIELDS:
        if layer.HasField(field):
            getattr(layer, field).batch_size = batch
            return True
    return False
