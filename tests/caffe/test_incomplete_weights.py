"""Weights files that hold less than the net needs: an empty file is an error, and every
learnable layer that gets nothing from the file is named (BVLC is silent on both: a net
then tests on its random initial weights)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from caffe.errors import WeightsError
from tests.caffe.net_fixtures import MLP, build_net


def saved(tmp_path, hdf5: bool = False) -> tuple[str, object]:
    net = build_net(MLP)
    path = str(tmp_path / ("w.h5" if hdf5 else "w.caffemodel"))
    net.save_hdf5(path) if hdf5 else net.save(path)
    return path, net


def varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if byte < 0x80:
            return value, at


def layer_starts(data: bytes) -> list[int]:
    """Where each top-level `layer` field (NetParameter field 100) starts."""
    starts, at = [], 0
    while at < len(data):
        begin = at
        key, at = varint(data, at)
        assert key & 7 in (0, 2), key  # the writer emits varints and length-delimited fields
        value, at = varint(data, at)
        if key & 7 == 2:
            at += value
        if key >> 3 == 100:
            starts.append(begin)
    return starts


def test_an_empty_caffemodel_is_an_error_naming_the_file(tmp_path):
    empty = tmp_path / "empty.caffemodel"
    empty.write_bytes(b"")
    net = build_net(MLP)
    before = net.params["ip1"][0].data.copy()
    with pytest.raises(WeightsError, match=r"empty\.caffemodel: no layers in this weights file"):
        net.copy_from(str(empty))
    np.testing.assert_array_equal(net.params["ip1"][0].data, before)


def test_a_file_cut_at_a_layer_boundary_names_the_layers_it_lacks(tmp_path, caplog):
    path, source = saved(tmp_path)
    with open(path, "rb") as f:
        data = f.read()
    short = tmp_path / "short.caffemodel"
    short.write_bytes(data[: layer_starts(data)[-2]])  # up to ip2 (the last two: ip2, loss)
    net = build_net(MLP)
    with caplog.at_level(logging.WARNING, logger="caffe"):
        net.copy_from(str(short))
    np.testing.assert_array_equal(net.params["ip1"][0].data, source.params["ip1"][0].data)
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert lines == [
        f"Layer 'ip2' (InnerProduct) got no weights from {short}: it keeps its initial values"
    ]


def test_a_complete_file_loads_without_a_word(tmp_path, caplog):
    for hdf5 in (False, True):
        path, _ = saved(tmp_path, hdf5)
        with caplog.at_level(logging.WARNING, logger="caffe"):
            build_net(MLP).copy_from(path)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_hdf5_weights_without_layers_are_an_error(tmp_path):
    import h5py

    path = tmp_path / "none.h5"
    with h5py.File(path, "w") as f:
        f.create_group("data")
    with pytest.raises(WeightsError, match=r"none\.h5: no layers in /data"):
        build_net(MLP).copy_from(str(path))
