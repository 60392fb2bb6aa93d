"""caffe/data/raw_datum.py reads a raw uint8 Datum's pixels and label as protobuf does, without a
copy, and leaves everything else to protobuf (Note [raw Datum view])."""

from __future__ import annotations

import numpy as np
import pytest

from caffe.data.raw_datum import raw_datum_view
from caffe.proto import caffe_pb2


def datum(**fields) -> bytes:
    return caffe_pb2.Datum(**fields).SerializeToString()


@pytest.mark.parametrize("label", [0, 7, 2**31 - 1, -1, -(2**31)])
@pytest.mark.parametrize("shape", [(3, 4, 5), (1, 1, 1), (3, 256, 256)])
def test_pixels_and_label_are_protobufs(shape, label):
    rng = np.random.default_rng(label & 0xFFFF)
    pixels = rng.integers(0, 256, shape, dtype=np.uint8)
    record = datum(channels=shape[0], height=shape[1], width=shape[2], data=pixels.tobytes(),
                   label=label)  # fmt: skip
    view = raw_datum_view(record)
    parsed = caffe_pb2.Datum.FromString(record)
    assert view is not None and view.label == parsed.label == label
    np.testing.assert_array_equal(view.pixels, pixels)
    assert view.pixels.base is not None and not view.pixels.flags.writeable  # a view


def test_fields_in_any_order_are_read():
    pixels = bytes(range(24))
    record = datum(label=3) + datum(data=pixels) + datum(width=4, channels=2) + datum(height=3)
    view = raw_datum_view(record)  # protobuf merges concatenated messages the same way
    assert view is not None and view.label == 3 and view.pixels.shape == (2, 3, 4)


@pytest.mark.parametrize(
    "record",
    [
        datum(channels=1, height=1, width=2, data=b"\xff\xd8", encoded=True),  # an image
        datum(channels=1, height=1, width=2, float_data=[1.0, 2.0]),  # float_data
        datum(channels=1, height=2, width=2, data=b"abc"),  # data does not match the shape
        datum(channels=1, height=1, width=1),  # no data
        datum(channels=1, height=1, width=1, data=b"a") + b"\x42\x01x",  # unknown field 8
        datum(channels=1, height=1, width=3, data=b"abc")[:-1],  # truncated
        b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # a varint too long
        b"",
    ],
)
def test_anything_else_is_left_to_protobuf(record):
    assert raw_datum_view(record) is None
