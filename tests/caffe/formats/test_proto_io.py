"""Prototxt reading and writing: upgrades applied, errors located as file:line:column."""

from __future__ import annotations

import os
import re

import pytest

from caffe.errors import PrototxtError
from caffe.formats.proto_io import (
    parse_net_text,
    parse_solver_text,
    read_net_param,
    read_solver_param,
    write_text,
)
from caffe.proto import caffe_pb2 as pb

LENET_HEAD = """name: "LeNet"
layer {
  name: "data"
  type: "Input"
  top: "data"
  input_param { shape: { dim: 64 dim: 1 dim: 28 dim: 28 } }
}
layer {
  name: "conv1"  # a comment
  type: "Convolution"
  bottom: "data"
  top: "conv1"
  param { lr_mult: 1 }
  convolution_param { num_output: 20 kernel_size: 5 stride: 1
    weight_filler { type: "xavier" } }
}
"""


def test_read_net_param_parses_text_format_details(tmp_path) -> None:
    path = tmp_path / "lenet.prototxt"
    path.write_text(LENET_HEAD)
    net = read_net_param(str(path))
    assert net.name == "LeNet"
    assert [layer.name for layer in net.layer] == ["data", "conv1"]
    assert list(net.layer[0].input_param.shape[0].dim) == [64, 1, 28, 28]
    assert net.layer[1].convolution_param.weight_filler.type == "xavier"


def test_read_net_param_upgrades(tmp_path) -> None:
    path = tmp_path / "vgg.prototxt"
    path.write_text('input: "data" input_dim: 1 input_dim: 3 input_dim: 2 input_dim: 2\n'
                    'layers { name: "r" type: RELU bottom: "data" top: "data" }\n')  # fmt: skip
    net = read_net_param(str(path))
    assert [(layer.name, layer.type) for layer in net.layer] == [("input", "Input"), ("r", "ReLU")]


def test_unknown_field_names_file_line_and_column(tmp_path) -> None:
    path = tmp_path / "lenet.prototxt"
    lines = LENET_HEAD.splitlines()
    lines.insert(11, '    botom: "data"')  # becomes line 12, field name at column 5
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(PrototxtError) as info:
        read_net_param(str(path))
    assert str(info.value) == (
        f'{path}:12:5: Message type "caffe.LayerParameter" has no field named "botom".'
    )


def test_syntax_error_location() -> None:
    with pytest.raises(PrototxtError, match=r"^net\.prototxt:2:\d+: Expected \"\}\""):
        parse_net_text('layer {\n  name: "a"\n', "net.prototxt")
    with pytest.raises(PrototxtError, match=r"^x\.prototxt:1:\d+: .*multiple \"name\""):
        parse_net_text('name: "a" name: "b"', "x.prototxt")
    with pytest.raises(PrototxtError, match=r"^y\.prototxt:2:\d+: .*pool"):
        parse_net_text("layer {\n pooling_param { pool: MAXIMUM } }", "y.prototxt")


def test_missing_required_field_is_an_error() -> None:
    with pytest.raises(PrototxtError, match=r"clip\.prototxt: .*required.*clip_param\.max"):
        parse_net_text('layer { name: "c" type: "Clip" clip_param { min: 0 } }', "clip.prototxt")


def test_missing_file(tmp_path) -> None:
    missing = str(tmp_path / "nope.prototxt")
    with pytest.raises(PrototxtError, match="^Could not open file " + re.escape(missing)):
        read_net_param(missing)
    with pytest.raises(PrototxtError, match=r"^Could not open file"):
        read_solver_param(missing)


def test_binary_file_given_as_prototxt(tmp_path) -> None:
    path = tmp_path / "model.caffemodel"
    path.write_bytes(b"\x0a\x03net\xa2\x06\xff\xfe")
    with pytest.raises(PrototxtError, match=r"model\.caffemodel:2:5: not UTF-8"):
        read_net_param(str(path))


def test_read_solver_param_upgrades_and_fixes_prefix(tmp_path) -> None:
    path = tmp_path / "lenet_solver.prototxt"
    path.write_text('net: "lenet.prototxt"\nbase_lr: 0.01\nsolver_type: NESTEROV\n')
    solver = read_solver_param(str(path))
    assert solver.type == "Nesterov"
    assert solver.snapshot_prefix == str(tmp_path / "lenet_solver")
    assert solver.base_lr == pytest.approx(0.01)


def test_parse_solver_text_keeps_prefix_unset() -> None:
    solver = parse_solver_text("base_lr: 0.1 solver_type: ADAM", "<string>")
    assert solver.type == "Adam" and not solver.HasField("snapshot_prefix")


def test_write_text_round_trips_and_is_atomic(tmp_path) -> None:
    net = parse_net_text(LENET_HEAD)
    path = tmp_path / "out.prototxt"
    write_text(str(path), net)
    assert read_net_param(str(path)) == net
    assert os.listdir(tmp_path) == ["out.prototxt"]  # no temporary file left behind


def test_write_text_into_missing_directory(tmp_path) -> None:
    with pytest.raises(PrototxtError, match="Could not write file"):
        write_text(str(tmp_path / "no" / "dir.prototxt"), pb.NetParameter())
