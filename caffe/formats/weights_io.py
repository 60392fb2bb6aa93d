"""Binary weight files: .caffemodel, .solverstate and mean .binaryproto, read and written fast.

Reading walks the protobuf wire format by hand (caffe/formats/wire.py): every layer is parsed
by protobuf *without* its blobs, so names, types and parameters are real messages, while each
blob's float arrays go from the memory-mapped file to numpy in one step
(caffe/formats/blob_proto.py), never through Python floats: a 0.9 GB VGG19-22K model reads in
a quarter of a second (docs/benchmarks.md).

    read_caffemodel(path, copy=True) -> WeightsFile   .net_param (upgraded, blobs stripped)
                                                      .layers: list[LayerWeights], file order
    write_caffemodel(path, net_param, blobs)   blobs: one list of BlobArray per net_param.layer,
                                               or a mapping {layer index or name: [BlobArray]}
    read_solverstate(path, copy=True) -> (SolverState without history, [BlobArray])
    write_solverstate(path, iter, current_step, learned_net, history)
    read_blobproto(path, copy=True) -> BlobArray
    write_blobproto(path, array, legacy4d=False)
    is_hdf5(path) -> bool

Writers produce the same bytes as protobuf's SerializeToString of the full message (fields in
number order: a layer's blobs=7 between param=6 and include=8; a blob's data=5, diff=6, then
shape=7) and replace the target atomically (temporary file, fsync, rename), so a crash never
leaves a half-written snapshot. Readers return private, writable, aligned float32 arrays (one
memcpy per blob, ~0.3 s for 0.9 GB); with copy=False they return read-only, possibly unaligned
views of the memory-mapped file instead, which cost nothing but keep the map open and must not
outlive an in-place rewrite of the file. Every failure raises WeightsError naming the file and,
for malformed content, the byte offset.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from google.protobuf.message import DecodeError, Message

from caffe.errors import CaffeError, WeightsError
from caffe.formats.atomic_write import write_atomically
from caffe.formats.blob_proto import (
    BlobArray,
    decode_blob,
    encode_blob,
    encode_blob_field,
    shape_equals,
)
from caffe.formats.upgrade import V1_TYPE_TO_V2, upgrade_net_param
from caffe.formats.upgrade_v0 import V0_TYPE_TO_V1
from caffe.formats.wire import (
    LEN,
    Buffer,
    Field,
    WireError,
    encode_len_field,
    encode_len_prefix,
    encode_varint_field,
    iter_fields,
)
from caffe.proto import caffe_pb2

__all__ = [
    "BlobArray",
    "LayerWeights",
    "WeightsFile",
    "is_hdf5",
    "read_blobproto",
    "read_caffemodel",
    "read_solverstate",
    "shape_equals",
    "write_blobproto",
    "write_caffemodel",
    "write_solverstate",
]

# Field numbers the fast path needs to find.
_NET_LAYERS_V1, _NET_LAYER = 2, 100
_LAYER_BLOBS, _V1_BLOBS, _V1_NESTED_V0, _V0_BLOBS = 7, 6, 1, 50
_STATE_HISTORY = 3
_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


@dataclass(frozen=True)
class LayerWeights:
    """The stored blobs of one layer; `type` is the V2 type string even for V1/V0 files."""

    name: str
    type: str
    blobs: list[BlobArray]


@dataclass(frozen=True)
class WeightsFile:
    net_param: caffe_pb2.NetParameter
    layers: list[LayerWeights]


# --------------------------------------------------------------------------- reading


def read_caffemodel(path: str, copy: bool = True) -> WeightsFile:
    """Read a binary NetParameter (.caffemodel, V2, V1 or V0) with its blobs as numpy arrays."""
    buf = _map_file(path)
    try:
        net, raw_layers = _split_net(buf, copy)
    except WireError as e:
        raise _corrupt(path, e) from None
    finally:
        if copy:
            _unmap(buf)
    layers = []
    v1_index = v2_index = 0
    for field_number, blobs in raw_layers:
        if field_number == _NET_LAYER:
            layer = net.layer[v2_index]
            v2_index += 1
            layers.append(LayerWeights(_text(layer.name), _text(layer.type), blobs))
        else:
            v1 = net.layers[v1_index]
            v1_index += 1
            layers.append(LayerWeights(*_v1_name_and_type(v1), blobs))
    try:
        upgrade_net_param(net, path)
    except CaffeError as e:
        raise WeightsError(str(e)) from None  # the upgrade's message already names the file
    return WeightsFile(net, layers)


def read_solverstate(path: str, copy: bool = True) -> tuple[caffe_pb2.SolverState, list[BlobArray]]:
    """Read a binary SolverState: the message without `history`, and the history blobs."""
    buf = _map_file(path)
    state = caffe_pb2.SolverState()
    history: list[BlobArray] = []
    try:
        kept = bytearray()
        for field in iter_fields(buf, 0, len(buf)):
            if field.number == _STATE_HISTORY and field.wire_type == LEN:
                history.append(_decode_blob_at(buf, field, f"history blob {len(history)}", copy))
            else:
                kept += buf[field.tag_start : field.end]
        _parse_into(state, bytes(kept), 0, "the solver state")
    except WireError as e:
        raise _corrupt(path, e) from None
    finally:
        if copy:
            _unmap(buf)
    return state, history


def read_blobproto(path: str, copy: bool = True) -> BlobArray:
    """Read a serialized BlobProto such as mean.binaryproto."""
    buf = _map_file(path)
    try:
        return decode_blob(buf, 0, len(buf), copy)
    except WireError as e:
        raise _corrupt(path, e) from None
    finally:
        if copy:
            _unmap(buf)


def is_hdf5(path: str) -> bool:
    """Whether `path` is an HDF5 file (signature at 0 or at a user-block offset 512·2^k)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            offset = 0
            while offset + len(_HDF5_MAGIC) <= size:
                f.seek(offset)
                if f.read(len(_HDF5_MAGIC)) == _HDF5_MAGIC:
                    return True
                offset = 512 if offset == 0 else offset * 2
    except OSError as e:
        raise WeightsError(f"Could not open file {path}: {e.strerror}") from None
    return False


def _map_file(path: str) -> Buffer:
    """The file's bytes, memory-mapped read-only (arrays viewing it keep the map alive)."""
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return b""
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise WeightsError(f"Could not open file {path}: {e.strerror}") from None


def _unmap(buf: Buffer) -> None:
    """Release the mapping now rather than at garbage collection, unless a view still uses it."""
    if isinstance(buf, mmap.mmap):
        with contextlib.suppress(BufferError):
            buf.close()


def _corrupt(path: str, error: WireError) -> WeightsError:
    if is_hdf5(path):  # a common mix-up: name the real problem, not a byte offset
        return WeightsError(f"{path} is an HDF5 file, not a binary protobuf file")
    return WeightsError(f"{path}: truncated or corrupt file at byte offset {error.offset}: {error}")


def _split_net(
    buf: Buffer, copy: bool
) -> tuple[caffe_pb2.NetParameter, list[tuple[int, list[BlobArray]]]]:
    """Parse a NetParameter with every layer's blobs cut out and decoded separately.

    Returns the blob-less net and, for each `layer` (100) or `layers` (2) entry in file
    order, (field number, its blobs).
    """
    net = caffe_pb2.NetParameter()
    header = bytearray()
    raw_layers: list[tuple[int, list[BlobArray]]] = []
    for field in iter_fields(buf, 0, len(buf)):
        if field.number in (_NET_LAYER, _NET_LAYERS_V1) and field.wire_type == LEN:
            blobs: list[BlobArray] = []
            v1 = field.number == _NET_LAYERS_V1
            stripped = _strip_blobs(buf, field.start, field.end, v1, blobs, copy)
            target = net.layers.add() if v1 else net.layer.add()
            _parse_into(target, stripped, field.tag_start, f"layer {len(raw_layers)}")
            raw_layers.append((field.number, blobs))
        else:
            header += buf[field.tag_start : field.end]
    _parse_into(net, bytes(header), 0, "the net header")
    return net, raw_layers


def _strip_blobs(
    buf: Buffer, start: int, end: int, v1: bool, blobs: list[BlobArray], copy: bool
) -> bytes:
    """The layer at buf[start:end] without its blob fields, which are decoded into `blobs`."""
    blob_field = _V1_BLOBS if v1 else _LAYER_BLOBS
    kept = bytearray()
    for field in iter_fields(buf, start, end):
        if field.number == blob_field and field.wire_type == LEN:
            blobs.append(_decode_blob_at(buf, field, f"blob {len(blobs)}", copy))
        elif v1 and field.number == _V1_NESTED_V0 and field.wire_type == LEN:
            # A V0 layer nested in a V1 entry keeps its blobs in field 50.
            kept_v0 = bytearray()
            for inner in iter_fields(buf, field.start, field.end):
                if inner.number == _V0_BLOBS and inner.wire_type == LEN:
                    blobs.append(_decode_blob_at(buf, inner, f"blob {len(blobs)}", copy))
                else:
                    kept_v0 += buf[inner.tag_start : inner.end]
            kept += encode_len_field(_V1_NESTED_V0, bytes(kept_v0))
        else:
            kept += buf[field.tag_start : field.end]
    return bytes(kept)


def _decode_blob_at(buf: Buffer, field: Field, what: str, copy: bool) -> BlobArray:
    try:
        return decode_blob(buf, field.start, field.end, copy)
    except WireError as e:
        raise WireError(f"{what}: {e}", e.offset) from None


def _parse_into(message: Message, data: bytes, offset: int, what: str) -> None:
    try:
        message.MergeFromString(data)
    except DecodeError as e:
        raise WireError(
            f"{what} does not parse as {message.DESCRIPTOR.full_name}: {e}", offset
        ) from None
    if not message.IsInitialized():
        missing = ", ".join(message.FindInitializationErrors())
        raise WireError(f"{what} lacks required fields: {missing}", offset)


def _v1_name_and_type(v1: caffe_pb2.V1LayerParameter) -> tuple[str, str]:
    if v1.HasField("layer"):  # V0: everything lives in the nested layer
        v0_type = _text(v1.layer.type)
        v1_type = V0_TYPE_TO_V1.get(v0_type)
        name = _text(v1.layer.name)
        return name, V1_TYPE_TO_V2[v1_type] if v1_type is not None else v0_type
    return _text(v1.name), V1_TYPE_TO_V2.get(v1.type, "")


def _text(value: str | bytes) -> str:
    """Protobuf hands back bytes for a proto2 string that is not UTF-8; Caffe accepts those,
    so keep them as an escaped str (it will simply match no layer name)."""
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value


# --------------------------------------------------------------------------- writing

BlobsLike = Sequence[BlobArray | tuple]
LayerBlobs = Sequence[BlobsLike] | Mapping[int | str, BlobsLike]


def write_caffemodel(
    path: str,
    net_param: caffe_pb2.NetParameter,
    layer_blobs: LayerBlobs,
    write_diff: bool = False,
) -> None:
    """Write `net_param` with each layer's blobs replaced by `layer_blobs` as a .caffemodel.

    `layer_blobs` is one blob list per `net_param.layer` entry, or a mapping from layer index
    or layer name to a blob list (layers not in it get no blobs). A blob is a BlobArray or a
    tuple (shape, data[, diff]). Diffs are written only with `write_diff` (snapshot_diff).
    Blobs already inside `net_param` are ignored; V1 `layers` must be upgraded first.
    """
    if len(net_param.layers):
        raise ValueError("write_caffemodel writes the current format: upgrade V1 'layers' first")
    header = caffe_pb2.NetParameter()
    header.CopyFrom(net_param)
    header.ClearField("layer")
    # `layer` (100) has the highest number, so the header's own fields all come first.
    buffers: list = [header.SerializeToString()]
    for index, layer in enumerate(net_param.layer):
        blobs = _blobs_for(layer_blobs, index, layer.name)
        try:
            layer_buffers, size = _encode_layer(layer, blobs, write_diff)
        except ValueError as e:
            raise ValueError(f"layer {index} ('{layer.name}'): {e}") from None
        buffers.append(encode_len_prefix(_NET_LAYER, size))
        buffers.extend(layer_buffers)
    write_atomically(path, buffers, WeightsError)


def write_solverstate(
    path: str,
    iter: int,
    current_step: int,
    learned_net: str,
    history: Sequence[BlobArray | np.ndarray],
) -> None:
    """Write a .solverstate; `history` blobs (BlobArray, or arrays with their shapes) in order."""
    buffers: list = [encode_varint_field(1, iter), encode_len_field(2, learned_net.encode())]
    for i, item in enumerate(history):
        blob = item if isinstance(item, BlobArray) else BlobArray.from_array(item)
        try:
            buffers.extend(encode_blob_field(_STATE_HISTORY, blob, write_diff=False)[0])
        except ValueError as e:
            raise ValueError(f"history blob {i}: {e}") from None
    buffers.append(encode_varint_field(4, current_step))
    write_atomically(path, buffers, WeightsError)


def write_blobproto(path: str, array: np.ndarray | BlobArray, legacy4d: bool = False) -> None:
    """Write one BlobProto (e.g. mean.binaryproto); `legacy4d` uses num/channels/height/width."""
    blob = array if isinstance(array, BlobArray) else BlobArray.from_array(array)
    if legacy4d != blob.legacy:
        blob = BlobArray(blob.shape, blob.data, blob.diff, legacy4d)
    write_atomically(path, encode_blob(blob, write_diff=False)[0], WeightsError)


def _blobs_for(layer_blobs: LayerBlobs, index: int, name: str) -> list[BlobArray]:
    if isinstance(layer_blobs, Mapping):
        items = layer_blobs.get(index, layer_blobs.get(name, ()))
    else:
        if len(layer_blobs) <= index:
            raise ValueError(
                f"layer_blobs has {len(layer_blobs)} entries, no entry for layer {index} ('{name}')"
            )
        items = layer_blobs[index]
    return [_as_blob(item) for item in items]


def _as_blob(item: BlobArray | tuple) -> BlobArray:
    if isinstance(item, BlobArray):
        return item
    shape, data, *rest = item
    diff = rest[0] if rest else None
    return BlobArray(tuple(int(d) for d in shape), np.asarray(data), diff)


def _encode_layer(
    layer: caffe_pb2.LayerParameter, blobs: list[BlobArray], write_diff: bool
) -> tuple[list, int]:
    if len(layer.blobs):
        stripped = caffe_pb2.LayerParameter()
        stripped.CopyFrom(layer)
        stripped.ClearField("blobs")
        layer = stripped
    raw = layer.SerializeToString()
    # Fields are serialized in number order; blobs (7) go right before the first field > 7.
    split = len(raw)
    for field in iter_fields(raw, 0, len(raw)):
        if field.number > _LAYER_BLOBS:
            split = field.tag_start
            break
    buffers: list = [raw[:split]]
    for blob in blobs:
        buffers.extend(encode_blob_field(_LAYER_BLOBS, blob, write_diff)[0])
    buffers.append(raw[split:])
    return buffers, sum(len(b) for b in buffers)
