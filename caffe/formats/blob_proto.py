"""BlobProto <-> numpy at the wire level, and the legacy-aware shape rule
(docs/caffe_format.md §1.1).

`BlobArray` is the in-memory form of one stored blob. `decode_blob` reads a BlobProto straight
from a byte buffer: packed float arrays become zero-copy numpy views; unpacked ones (one tag per
value, which protobuf readers must accept) are gathered with one strided numpy read.
`encode_blob` produces exactly the bytes protobuf's SerializeToString would for the same
BlobProto (fields in number order), as a list of buffers so that big arrays are written to the
file without being copied.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from caffe.formats.wire import (
    FIXED32,
    FIXED64,
    LEN,
    VARINT,
    Buffer,
    Field,
    WireError,
    as_int32,
    as_int64,
    encode_len_field,
    encode_len_prefix,
    encode_varint,
    encode_varint_field,
    iter_fields,
    read_field,
    read_varint,
)

# BlobProto field numbers.
_NUM, _CHANNELS, _HEIGHT, _WIDTH = 1, 2, 3, 4
_DATA, _DIFF, _SHAPE, _DOUBLE_DATA, _DOUBLE_DIFF = 5, 6, 7, 8, 9
_LEGACY_FIELDS = (_NUM, _CHANNELS, _HEIGHT, _WIDTH)
_FLOAT32 = np.dtype("<f4")
_FLOAT64 = np.dtype("<f8")


@dataclass(frozen=True, eq=False)
class BlobArray:
    """One stored blob: shape, flat float32 data, optional flat float32 diff.

    `legacy` is True when the shape came from (or is to be written as) the deprecated
    num/channels/height/width fields; such blobs match target shapes by `shape_equals`'s
    legacy rule. Readers return private writable arrays, or with copy=False read-only views of
    the file.
    """

    shape: tuple[int, ...]
    data: np.ndarray
    diff: np.ndarray | None = None
    legacy: bool = False

    @property
    def count(self) -> int:
        return math.prod(self.shape)

    def reshaped(self) -> np.ndarray:
        """The data as an array of the blob's shape."""
        return self.data.reshape(self.shape)

    @classmethod
    def from_array(
        cls, data: np.ndarray, diff: np.ndarray | None = None, legacy: bool = False
    ) -> BlobArray:
        """Wrap an N-D array (and optional diff of the same size) as a blob of its shape."""
        array = np.asarray(data)
        flat_diff = None if diff is None else np.asarray(diff).reshape(-1)
        return cls(tuple(int(d) for d in array.shape), array.reshape(-1), flat_diff, legacy)


def shape_equals(blob: BlobArray, target_shape: Sequence[int]) -> bool:
    """Whether `blob` can be loaded into a blob of `target_shape` (Caffe's ShapeEquals).

    Legacy 4-D blobs compare against the target right-aligned and padded with 1s to four axes
    (a 1x1x4096x9216 weight fits (4096, 9216)); the target may have at most four axes.
    Otherwise the shapes must be identical.
    """
    target = tuple(int(d) for d in target_shape)
    if blob.legacy:
        return len(target) <= 4 and (1,) * (4 - len(target)) + target == tuple(blob.shape)
    return tuple(blob.shape) == target


# --------------------------------------------------------------------------- decoding


def decode_blob(buf: Buffer, start: int, end: int, copy: bool = True) -> BlobArray:
    """Decode the BlobProto occupying buf[start:end]. Raises WireError if it is malformed.

    With copy=False, packed arrays are read-only views of `buf` (which they keep alive);
    otherwise every array is a private, writable, aligned float32 array.
    """
    legacy: dict[int, int] = {}
    dims: list[int] = []
    parts: dict[int, list[np.ndarray]] = {_DATA: [], _DIFF: [], _DOUBLE_DATA: [], _DOUBLE_DIFF: []}
    pos = start
    while pos < end:
        field = read_field(buf, pos, end)
        pos = field.end
        number, wire_type = field.number, field.wire_type
        if number in parts:
            dtype = _FLOAT32 if number in (_DATA, _DIFF) else _FLOAT64
            single = FIXED32 if dtype is _FLOAT32 else FIXED64
            if wire_type == LEN:
                size = field.end - field.start
                if size % dtype.itemsize:
                    raise WireError(
                        f"packed field {number} holds {size} bytes, not a multiple of "
                        f"{dtype.itemsize}",
                        field.tag_start,
                    )
                if size:
                    parts[number].append(
                        np.frombuffer(buf, dtype, size // dtype.itemsize, field.start)
                    )
            elif wire_type == single:
                values, pos = _unpacked_run(buf, field, end, dtype)
                parts[number].append(values)
            # Any other wire type makes it an unknown field, which protobuf skips.
        elif number in _LEGACY_FIELDS and wire_type == VARINT:
            legacy[number] = as_int32(field.value)
        elif number == _SHAPE and wire_type == LEN:
            # A repeated occurrence merges, as protobuf merges a singular message.
            dims.extend(_decode_shape(buf, field.start, field.end))

    if legacy:
        shape = tuple(legacy.get(n, 0) for n in _LEGACY_FIELDS)
    else:
        shape = tuple(dims)
    if any(d < 0 for d in shape):
        raise WireError(f"blob shape {shape} has a negative dimension", start)
    count = math.prod(shape)
    data = _join(parts[_DOUBLE_DATA] or parts[_DATA], copy)
    if data.size != count:
        raise WireError(f"blob holds {data.size} values but its shape {shape} needs {count}", start)
    diff_parts = parts[_DOUBLE_DIFF] or parts[_DIFF]
    diff = _join(diff_parts, copy) if diff_parts else None
    if diff is not None and diff.size != count:
        raise WireError(
            f"blob diff holds {diff.size} values but its shape {shape} needs {count}", start
        )
    return BlobArray(shape, data, diff, bool(legacy))


def _unpacked_run(buf: Buffer, field: Field, end: int, dtype: np.dtype) -> tuple[np.ndarray, int]:
    """Read a run of unpacked values (tag, value, tag, value, ...) starting at `field`.

    A run of same-tag fixed-width records is read with one strided numpy view instead of
    one Python step per value. Returns the values and the position after the run.
    """
    tag_size = field.start - field.tag_start
    stride = tag_size + dtype.itemsize
    records = (end - field.tag_start) // stride
    raw = np.frombuffer(buf, np.uint8, records * stride, field.tag_start).reshape(records, stride)
    tag = raw[0, :tag_size]
    same_tag = np.all(raw[:, :tag_size] == tag, axis=1)
    mismatch = np.flatnonzero(~same_tag)
    run = int(mismatch[0]) if mismatch.size else records
    values = raw[:run, tag_size:].copy().view(dtype).reshape(-1)
    return values, field.tag_start + run * stride


def _decode_shape(buf: Buffer, start: int, end: int) -> list[int]:
    dims: list[int] = []
    for field in iter_fields(buf, start, end):
        if field.number != 1:
            continue
        if field.wire_type == VARINT:
            dims.append(as_int64(field.value))
        elif field.wire_type == LEN:
            pos = field.start
            while pos < field.end:
                value, pos = read_varint(buf, pos, field.end)
                dims.append(as_int64(value))
    return dims


def _join(parts: list[np.ndarray], copy: bool) -> np.ndarray:
    """One float32 array from the pieces of a repeated field: owned, or a read-only view."""
    if not parts:
        array = np.empty(0, _FLOAT32)
    elif len(parts) == 1:
        array = parts[0]
    else:
        array = np.concatenate(parts)
    if array.dtype != _FLOAT32:
        array = array.astype(_FLOAT32)
    if copy:
        if not array.flags.owndata:
            array = array.copy()
    else:
        array.flags.writeable = False
    return array


# --------------------------------------------------------------------------- encoding


def float32_flat(array: np.ndarray) -> np.ndarray:
    """`array` as a contiguous little-endian float32 vector (no copy when it already is one)."""
    return np.ascontiguousarray(array, dtype=_FLOAT32).reshape(-1)


def encode_blob(blob: BlobArray, write_diff: bool = True) -> tuple[list, int]:
    """Serialize `blob` as a BlobProto payload: (buffers in order, total byte length).

    Non-legacy blobs write `shape` (omitted for 0-axis blobs, as Caffe's ToProto does);
    legacy blobs write num/channels/height/width (shape right-aligned, padded with 1s) and
    no `shape`, as compute_image_mean does. float32 data only (never double_data).
    """
    shape = tuple(int(d) for d in blob.shape)
    data = float32_flat(blob.data)
    count = math.prod(shape)
    if data.size != count:
        raise ValueError(f"blob data has {data.size} values but shape {shape} needs {count}")
    diff = None
    if write_diff and blob.diff is not None:
        diff = float32_flat(blob.diff)
        if diff.size != count:
            raise ValueError(f"blob diff has {diff.size} values but shape {shape} needs {count}")

    head = bytearray()
    if blob.legacy:
        if len(shape) > 4:
            raise ValueError(f"a legacy 4-D blob cannot hold shape {shape} ({len(shape)} axes)")
        for number, dim in zip(_LEGACY_FIELDS, (1,) * (4 - len(shape)) + shape):
            head += encode_varint_field(number, dim)
    buffers: list = [bytes(head)]
    for number, array in ((_DATA, data), (_DIFF, diff)):
        if array is not None and array.size:
            buffers.append(encode_len_prefix(number, array.nbytes))
            buffers.append(memoryview(array).cast("B"))
    if not blob.legacy and shape:
        dims = b"".join(encode_varint(d) for d in shape)
        buffers.append(encode_len_field(_SHAPE, encode_len_field(1, dims)))
    return buffers, sum(len(b) for b in buffers)


def encode_blob_field(number: int, blob: BlobArray, write_diff: bool = True) -> tuple[list, int]:
    """A whole `repeated BlobProto` field occurrence (tag, length, payload) as buffers."""
    buffers, size = encode_blob(blob, write_diff)
    prefix = encode_len_prefix(number, size)
    return [prefix, *buffers], len(prefix) + size
