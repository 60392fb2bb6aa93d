"""Protobuf wire-format primitives for the fast weights path (caffe/formats/weights_io.py).

Only what a .caffemodel needs: varints, tags, and walking the fields of one message held in a
byte buffer (bytes, bytearray, mmap) without copying it. Python protobuf would turn every
float of a 0.9 GB model into a Python object; walking the few hundred fields around the float
arrays by hand and handing the arrays to numpy is what makes reading fast.

Wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32. Groups (3, 4) are a
deprecated proto2 feature that no Caffe file contains; they are reported as corrupt.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from typing import NamedTuple, TypeAlias

# Anything indexable by position that yields ints and supports the buffer protocol.
Buffer: TypeAlias = bytes | bytearray | memoryview | mmap.mmap

VARINT = 0
FIXED64 = 1
LEN = 2
FIXED32 = 5

_MASK64 = (1 << 64) - 1


class WireError(Exception):
    """The bytes are not a well-formed protobuf message; `offset` is where reading failed."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


class Field(NamedTuple):
    """One field occurrence inside a message buffer.

    For LEN fields, [start, end) is the payload (without tag and length); for FIXED32/FIXED64
    it is the raw little-endian value; for VARINT fields start == end and `value` holds the
    decoded unsigned integer. [tag_start, end) is the whole field as it appears on the wire.
    """

    number: int
    wire_type: int
    start: int
    end: int
    value: int
    tag_start: int


def read_varint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """Decode an unsigned varint at buf[pos:end]; return (value, position after it)."""
    result = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise WireError("varint runs past the end of its message", start)
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result & _MASK64, pos
        shift += 7
        if shift >= 70:
            raise WireError("varint longer than 10 bytes", start)


def read_field(buf: Buffer, pos: int, end: int) -> Field:
    """Decode the one field starting at buf[pos] inside a message ending at `end`."""
    tag_start = pos
    key, pos = read_varint(buf, pos, end)
    number, wire_type = key >> 3, key & 7
    if number == 0:
        raise WireError("field number 0 is invalid", tag_start)
    if wire_type == VARINT:
        value, pos = read_varint(buf, pos, end)
        return Field(number, wire_type, pos, pos, value, tag_start)
    if wire_type == LEN:
        size, pos = read_varint(buf, pos, end)
    elif wire_type == FIXED32:
        size = 4
    elif wire_type == FIXED64:
        size = 8
    else:
        raise WireError(f"unsupported wire type {wire_type} for field {number}", tag_start)
    if pos + size > end:
        raise WireError(
            f"field {number} needs {size} bytes but only {end - pos} remain in its message",
            tag_start,
        )
    return Field(number, wire_type, pos, pos + size, 0, tag_start)


def iter_fields(buf: Buffer, start: int, end: int) -> Iterator[Field]:
    """Yield every field of the message occupying buf[start:end], in wire order."""
    pos = start
    while pos < end:
        field = read_field(buf, pos, end)
        yield field
        pos = field.end


def as_int32(value: int) -> int:
    """Interpret a decoded varint as protobuf int32 (negatives are sign-extended to 64 bits)."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def as_int64(value: int) -> int:
    return value - (1 << 64) if value & (1 << 63) else value


def encode_varint(value: int) -> bytes:
    """Encode an integer as protobuf does for int32/int64/uint fields (negatives take 10 bytes)."""
    value &= _MASK64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_tag(number: int, wire_type: int) -> bytes:
    return encode_varint((number << 3) | wire_type)


def encode_len_prefix(number: int, length: int) -> bytes:
    """Tag and length of a LEN field whose payload of `length` bytes follows."""
    return encode_tag(number, LEN) + encode_varint(length)


def encode_len_field(number: int, payload: bytes) -> bytes:
    return encode_len_prefix(number, len(payload)) + payload


def encode_varint_field(number: int, value: int) -> bytes:
    return encode_tag(number, VARINT) + encode_varint(value)
