"""Small databases, images and nets written by the data tests."""

from __future__ import annotations

import numpy as np
from google.protobuf import text_format

from caffe.data.db import open_db_writer
from caffe.proto import caffe_pb2


def make_datum(array: np.ndarray, label: int = 0) -> caffe_pb2.Datum:
    """A Datum holding a C×H×W array: uint8 -> `data` bytes, anything else -> `float_data`."""
    datum = caffe_pb2.Datum(
        channels=array.shape[0], height=array.shape[1], width=array.shape[2], label=label
    )
    if array.dtype == np.uint8:
        datum.data = array.tobytes()
    else:
        datum.float_data.extend(array.astype(np.float32).ravel().tolist())
    return datum


def write_db(path, records, backend: str = "lmdb") -> None:
    """Write (key, Datum or bytes) records, in the given (not necessarily sorted) order."""
    with open_db_writer(str(path), backend) as writer:
        for key, value in records:
            writer.put(key, value if isinstance(value, bytes) else value.SerializeToString())


def indexed_items(count: int, shape=(2, 4, 5)) -> list[np.ndarray]:
    """`count` distinct uint8 C×H×W items: item i holds 10·i + its pixel index (mod 256)."""
    size = int(np.prod(shape))
    pixels = np.arange(size)
    return [((10 * i + pixels) % 256).astype(np.uint8).reshape(shape) for i in range(count)]


def write_indexed_db(path, count: int, shape=(2, 4, 5), backend: str = "lmdb") -> list[np.ndarray]:
    """An LMDB whose record with key %08d i is indexed_items()[i] with label i; items returned.

    Records are put in reverse order so that reading in key order is not the insertion order.
    """
    items = indexed_items(count, shape)
    write_db(path, [(f"{i:08d}", make_datum(items[i], i)) for i in reversed(range(count))], backend)
    return items


def net_param(text: str, phase: int = caffe_pb2.TRAIN) -> caffe_pb2.NetParameter:
    param = text_format.Parse(text, caffe_pb2.NetParameter())
    param.state.phase = phase
    return param
