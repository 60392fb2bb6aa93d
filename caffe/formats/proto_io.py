"""Reading and writing Caffe definitions in protobuf text format (prototxt).

    read_net_param(path) -> NetParameter           parsed, then upgraded (caffe/formats/upgrade.py)
    parse_net_text(text, source="<string>")        the same from a string
    read_solver_param(path) -> SolverParameter     parsed, solver_type upgraded, snapshot_prefix
                                                   fixed up relative to `path`
    parse_solver_text(text, source="<string>")     parsed, solver_type upgraded (no prefix rule:
                                                   there is no solver file to derive it from)
    write_text(path, message)                      text format, written atomically

Errors raise PrototxtError whose message starts with "file:line:column: " as compilers do,
e.g. `lenet.prototxt:12:5: Message type "caffe.LayerParameter" has no field named "botom".`
Binary weight files (.caffemodel, .solverstate, .binaryproto) live in
caffe/formats/weights_io.py and are re-exported here for convenience.
"""

from __future__ import annotations

from typing import TypeVar

from google.protobuf import text_format
from google.protobuf.message import Message

from caffe.errors import PrototxtError
from caffe.formats.atomic_write import write_atomically
from caffe.formats.upgrade import upgrade_net_param, upgrade_solver_param
from caffe.formats.weights_io import (
    BlobArray,
    LayerWeights,
    WeightsFile,
    is_hdf5,
    read_blobproto,
    read_caffemodel,
    read_solverstate,
    shape_equals,
    write_blobproto,
    write_caffemodel,
    write_solverstate,
)
from caffe.proto import caffe_pb2

__all__ = [
    "BlobArray",
    "LayerWeights",
    "WeightsFile",
    "is_hdf5",
    "parse_net_text",
    "parse_solver_text",
    "parse_text",
    "read_blobproto",
    "read_caffemodel",
    "read_net_param",
    "read_solver_param",
    "read_solverstate",
    "read_text_file",
    "shape_equals",
    "write_blobproto",
    "write_caffemodel",
    "write_solverstate",
    "write_text",
]

M = TypeVar("M", bound=Message)


def read_net_param(path: str) -> caffe_pb2.NetParameter:
    """Read a net prototxt and upgrade it to the current format."""
    return parse_net_text(read_text_file(path), source=path)


def parse_net_text(text: str, source: str = "<string>") -> caffe_pb2.NetParameter:
    net = parse_text(text, caffe_pb2.NetParameter(), source)
    upgrade_net_param(net, source)
    return net


def read_solver_param(path: str) -> caffe_pb2.SolverParameter:
    """Read a solver prototxt, upgrade solver_type and apply the snapshot_prefix rule."""
    solver = parse_text(read_text_file(path), caffe_pb2.SolverParameter(), path)
    upgrade_solver_param(solver, path, fix_snapshot_prefix=True)
    return solver


def parse_solver_text(text: str, source: str = "<string>") -> caffe_pb2.SolverParameter:
    solver = parse_text(text, caffe_pb2.SolverParameter(), source)
    upgrade_solver_param(solver, source, fix_snapshot_prefix=False)
    return solver


def read_text_file(path: str) -> str:
    """The file's text; PrototxtError("Could not open file ...") if it cannot be read."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise PrototxtError(f"Could not open file {path}: {e.strerror}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise PrototxtError(
            f"{path}:{line}:{column}: not UTF-8 text (is this a binary file?)"
        ) from None


def parse_text(text: str, message: M, source: str = "<string>") -> M:
    """Parse protobuf text into `message` (cleared first), as Caffe's strict text parser does.

    Unknown fields, a non-repeated field given twice and missing required fields are errors.
    """
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as e:
        raise PrototxtError(_located(source, e)) from None
    if not message.IsInitialized():
        missing = ", ".join(message.FindInitializationErrors())
        raise PrototxtError(
            f"{source}: message of type {message.DESCRIPTOR.full_name} is missing required "
            f"fields: {missing}"
        )
    return message


def _located(source: str, error: text_format.ParseError) -> str:
    """`source:line:column: what` from protobuf's "line:column : what" message."""
    line, column = error.GetLine(), error.GetColumn()
    text = str(error)
    if line is None:
        return f"{source}: {text}"
    prefix = f"{line}:{column} : " if column is not None else f"{line} : "
    if text.startswith(prefix):
        text = text[len(prefix) :]
    where = f"{line}:{column}" if column is not None else f"{line}"
    return f"{source}:{where}: {text}"


def write_text(path: str, message: Message) -> None:
    """Write `message` in text format, replacing `path` atomically."""
    data = text_format.MessageToString(message).encode("utf-8")
    write_atomically(path, [data], PrototxtError)
