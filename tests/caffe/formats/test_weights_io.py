"""The fast .caffemodel/.solverstate/.binaryproto path against protobuf's own (de)serializer."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format

from caffe.errors import WeightsError
from caffe.formats import weights_io
from caffe.formats.weights_io import (
    BlobArray,
    is_hdf5,
    read_blobproto,
    read_caffemodel,
    read_solverstate,
    shape_equals,
    write_blobproto,
    write_caffemodel,
    write_solverstate,
)
from caffe.formats.wire import encode_len_field, encode_tag
from caffe.proto import caffe_pb2 as pb

NET_TEXT = """
name: "tiny"
layer { name: "data" type: "Input" top: "data"
        input_param { shape { dim: 2 dim: 3 dim: 4 dim: 4 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        param { lr_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
        include { phase: TRAIN } phase: TRAIN
        convolution_param { num_output: 5 kernel_size: 3 } }
layer { name: "bn" type: "BatchNorm" bottom: "conv" top: "conv" }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "ip" type: "InnerProduct" bottom: "conv" top: "ip" propagate_down: true
        transform_param { scale: 0.5 } inner_product_param { num_output: 3 } }
layer { name: "scalar" type: "Parameter" top: "s" parameter_param { shape { } } }
"""


def _tiny_blobs(seed: int = 0) -> dict[str, list[BlobArray]]:
    rng = np.random.default_rng(seed)

    def blob(*shape: int, diff: bool = True) -> BlobArray:
        data = rng.standard_normal(shape).astype(np.float32)
        grad = rng.standard_normal(shape).astype(np.float32) if diff else None
        return BlobArray.from_array(data, grad)

    return {
        "conv": [blob(5, 3, 3, 3), blob(5)],
        "bn": [blob(5), blob(5), blob(1)],
        "ip": [blob(3, 20), blob(3), blob(0, diff=False)],
        "scalar": [blob()],
    }


def _reference_bytes(net: pb.NetParameter, blobs: dict[str, list[BlobArray]], diff: bool) -> bytes:
    """What protobuf itself serializes for the same net with blobs filled in, Caffe-style."""
    full = pb.NetParameter()
    full.CopyFrom(net)
    for layer in full.layer:
        for blob in blobs.get(layer.name, []):
            proto = layer.blobs.add()
            if blob.legacy:
                proto.num, proto.channels, proto.height, proto.width = blob.shape
            else:
                for d in blob.shape:  # a 0-axis blob writes no shape, as Caffe's ToProto
                    proto.shape.dim.append(d)
            proto.data.extend(blob.data.reshape(-1))
            if diff and blob.diff is not None:
                proto.diff.extend(blob.diff.reshape(-1))
    return full.SerializeToString()


@pytest.mark.parametrize("write_diff", [False, True])
def test_caffemodel_bytes_equal_protobuf_and_read_back_exactly(tmp_path, write_diff) -> None:
    net = text_format.Parse(NET_TEXT, pb.NetParameter())
    blobs = _tiny_blobs()
    path = str(tmp_path / "tiny.caffemodel")
    write_caffemodel(path, net, blobs, write_diff=write_diff)
    with open(path, "rb") as f:
        assert f.read() == _reference_bytes(net, blobs, write_diff)

    weights = read_caffemodel(path)
    assert weights.net_param == net
    names_and_types = [(layer.name, layer.type) for layer in net.layer]
    assert [(layer.name, layer.type) for layer in weights.layers] == names_and_types
    for layer in weights.layers:
        expected = blobs.get(layer.name, [])
        assert len(layer.blobs) == len(expected)
        for got, want in zip(layer.blobs, expected):
            assert got.shape == want.shape and not got.legacy
            assert got.data.dtype == np.float32
            assert got.data.tobytes() == want.data.tobytes()
            if write_diff and want.diff is not None:
                assert got.diff.tobytes() == want.diff.tobytes()
            else:
                assert got.diff is None
    assert weights.layers[-1].blobs[0].shape == ()


def test_blobs_by_index_tuples_and_existing_blobs_ignored(tmp_path) -> None:
    net = text_format.Parse(NET_TEXT, pb.NetParameter())
    net.layer[1].blobs.add().data.append(9.0)  # stale blob in the message: replaced
    w = np.arange(135, dtype=np.float32).reshape(5, 3, 3, 3)
    path = str(tmp_path / "m.caffemodel")
    write_caffemodel(path, net, {1: [(w.shape, w)]})
    layers = read_caffemodel(path).layers
    assert [len(layer.blobs) for layer in layers] == [0, 1, 0, 0, 0, 0]
    np.testing.assert_array_equal(layers[1].blobs[0].reshaped(), w)


def test_writer_rejects_wrong_blob_size_naming_the_layer(tmp_path) -> None:
    net = text_format.Parse(NET_TEXT, pb.NetParameter())
    with pytest.raises(ValueError, match=r"layer 1 \('conv'\).*shape \(5, 3\) needs 15"):
        write_caffemodel(str(tmp_path / "x"), net, {"conv": [((5, 3), np.zeros(14, np.float32))]})
    assert os.listdir(tmp_path) == []


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch) -> None:
    net = text_format.Parse(NET_TEXT, pb.NetParameter())
    path = tmp_path / "snap.caffemodel"
    path.write_bytes(b"old snapshot")

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(weights_io.os, "fsync", broken_fsync)
    with pytest.raises(WeightsError, match=r"Could not write file .*snap\.caffemodel"):
        write_caffemodel(str(path), net, _tiny_blobs())
    assert path.read_bytes() == b"old snapshot"
    assert os.listdir(tmp_path) == ["snap.caffemodel"]


V1_NET_TEXT = """
name: "VGG_ILSVRC_19_layers"
input: "data" input_dim: 1 input_dim: 3 input_dim: 224 input_dim: 224
layers { bottom: "data" top: "conv1_1" name: "conv1_1" type: CONVOLUTION
         convolution_param { num_output: 2 pad: 1 kernel_size: 3 } }
layers { bottom: "conv1_1" top: "conv1_1" name: "relu1_1" type: RELU }
layers { bottom: "conv1_1" top: "fc6" name: "fc6" type: INNER_PRODUCT
         inner_product_param { num_output: 4 } }
"""


def _legacy_blob(proto: pb.BlobProto, dims: tuple[int, int, int, int], rng) -> np.ndarray:
    proto.num, proto.channels, proto.height, proto.width = dims
    values = rng.standard_normal(int(np.prod(dims))).astype(np.float32)
    proto.data.extend(values)
    return values


def test_v1_caffemodel_with_legacy_blobs(tmp_path) -> None:
    rng = np.random.default_rng(1)
    net = text_format.Parse(V1_NET_TEXT, pb.NetParameter())
    w1 = _legacy_blob(net.layers[0].blobs.add(), (2, 3, 3, 3), rng)
    b1 = _legacy_blob(net.layers[0].blobs.add(), (1, 1, 1, 2), rng)
    w6 = _legacy_blob(net.layers[2].blobs.add(), (1, 1, 4, 6), rng)
    path = tmp_path / "VGG_ILSVRC_19_layers.caffemodel"
    path.write_bytes(net.SerializeToString())

    weights = read_caffemodel(str(path))
    assert [(layer.name, layer.type) for layer in weights.layers] == [
        ("conv1_1", "Convolution"),
        ("relu1_1", "ReLU"),
        ("fc6", "InnerProduct"),
    ]
    upgraded = weights.net_param
    types = [layer.type for layer in upgraded.layer]
    assert types == ["Input", "Convolution", "ReLU", "InnerProduct"]
    assert len(upgraded.layers) == 0 and all(len(layer.blobs) == 0 for layer in upgraded.layer)
    conv_w, conv_b = weights.layers[0].blobs
    assert conv_w.legacy and conv_w.shape == (2, 3, 3, 3)
    np.testing.assert_array_equal(conv_w.data, w1)
    np.testing.assert_array_equal(conv_b.data, b1)
    assert shape_equals(conv_b, (2,)) and shape_equals(conv_w, (2, 3, 3, 3))
    fc6 = weights.layers[2].blobs[0]
    assert shape_equals(fc6, (4, 6)) and not shape_equals(fc6, (6, 4))
    np.testing.assert_array_equal(fc6.reshaped(), w6.reshape(1, 1, 4, 6))


def test_v0_caffemodel_blobs_and_types(tmp_path) -> None:
    net = pb.NetParameter()
    connection = net.layers.add()
    connection.layer.name, connection.layer.type = "conv1", "conv"
    blob = connection.layer.blobs.add()
    blob.num, blob.channels, blob.height, blob.width = 1, 1, 1, 3
    blob.data.extend([1, 2, 3])
    path = tmp_path / "v0.caffemodel"
    path.write_bytes(net.SerializeToString())
    weights = read_caffemodel(str(path))
    assert [(layer.name, layer.type) for layer in weights.layers] == [("conv1", "Convolution")]
    assert list(weights.layers[0].blobs[0].data) == [1, 2, 3]
    assert weights.net_param.layer[0].type == "Convolution"


@pytest.mark.parametrize(
    ("dims", "target", "fits"),
    [
        ((1, 1, 4096, 9216), (4096, 9216), True),
        ((1, 1, 1, 4096), (4096,), True),
        ((1, 1, 1, 4096), (4096, 1), False),
        ((64, 3, 3, 3), (64, 3, 3, 3), True),
        ((1, 1, 1, 1), (), True),
        ((1, 1, 2, 3), (1, 1, 1, 2, 3), False),
        ((2, 3, 1, 1), (2, 3), False),
    ],
)
def test_shape_equals_legacy_rule(dims, target, fits) -> None:
    blob = BlobArray(dims, np.zeros(int(np.prod(dims)), np.float32), legacy=True)
    assert shape_equals(blob, target) is fits


def test_shape_equals_current_shapes_must_be_identical() -> None:
    blob = BlobArray((4096,), np.zeros(4096, np.float32))
    assert shape_equals(blob, (4096,)) and not shape_equals(blob, (1, 1, 1, 4096))


def _one_layer_file(tmp_path, blob_payload: bytes) -> str:
    layer = encode_len_field(1, b"ip") + encode_len_field(2, b"InnerProduct")
    layer += encode_len_field(7, blob_payload)
    path = tmp_path / "handmade.caffemodel"
    path.write_bytes(encode_len_field(100, layer))
    return str(path)


def test_double_data_is_converted_to_float32(tmp_path) -> None:
    proto = pb.BlobProto()
    proto.shape.dim.extend([2, 2])
    values = np.array([0.1, -2.5, 1e-40, 3.0])
    proto.double_data.extend(values)
    proto.double_diff.extend(values * 2)
    blob = read_caffemodel(_one_layer_file(tmp_path, proto.SerializeToString())).layers[0].blobs[0]
    assert blob.data.dtype == np.float32 and blob.shape == (2, 2)
    np.testing.assert_array_equal(blob.data, values.astype(np.float32))
    np.testing.assert_array_equal(blob.diff, (values * 2).astype(np.float32))


def test_unpacked_and_split_float_runs_are_accepted(tmp_path) -> None:
    values = np.arange(1, 12, dtype=np.float32) / 7
    packed = encode_len_field(5, values[:3].tobytes())
    unpacked = b"".join(encode_tag(5, 5) + v.tobytes() for v in values[3:9])
    shape = encode_len_field(7, encode_tag(1, 0) + b"\x0b")  # one unpacked dim: 11
    payload = packed + unpacked + shape + encode_len_field(5, values[9:].tobytes())
    assert list(pb.BlobProto.FromString(payload).data) == list(values)  # protobuf agrees
    blob = read_caffemodel(_one_layer_file(tmp_path, payload)).layers[0].blobs[0]
    assert blob.shape == (11,)
    np.testing.assert_array_equal(blob.data, values)


def test_count_mismatch_is_reported(tmp_path) -> None:
    proto = pb.BlobProto()
    proto.shape.dim.extend([2, 3])
    proto.data.extend([1.0] * 5)
    path = _one_layer_file(tmp_path, proto.SerializeToString())
    with pytest.raises(WeightsError, match=r"handmade\.caffemodel.*blob 0.*5 values.*\(2, 3\)"):
        read_caffemodel(path)


def test_truncation_at_every_inner_cut_point(tmp_path) -> None:
    """Cuts that fall inside a top-level field are detected; cuts between fields are not
    detectable in protobuf and must leave a shorter but valid net."""
    net = text_format.Parse(NET_TEXT, pb.NetParameter())
    full_path = str(tmp_path / "full.caffemodel")
    write_caffemodel(full_path, net, _tiny_blobs())
    data = Path(full_path).read_bytes()
    boundaries = {0}
    reference = pb.NetParameter.FromString(data)
    boundaries.add(len(encode_len_field(1, reference.name.encode())))
    for layer in reference.layer:
        boundaries.add(max(boundaries) + len(encode_len_field(100, layer.SerializeToString())))
    cut_path = str(tmp_path / "cut.caffemodel")
    for cut in range(1, len(data)):
        with open(cut_path, "wb") as f:
            f.write(data[:cut])
        if cut in boundaries:
            assert len(read_caffemodel(cut_path).layers) <= len(net.layer)
            continue
        with pytest.raises(
            WeightsError, match=r"cut\.caffemodel: truncated or corrupt file at byte offset \d+"
        ):
            read_caffemodel(cut_path)


def test_corrupt_bytes_never_escape_as_other_errors(tmp_path) -> None:
    net = text_format.Parse(NET_TEXT, pb.NetParameter())
    path = str(tmp_path / "c.caffemodel")
    write_caffemodel(path, net, _tiny_blobs())
    data = bytearray(Path(path).read_bytes())
    rng = np.random.default_rng(7)
    failures = 0
    for _ in range(300):
        corrupt = bytearray(data)
        for pos in rng.integers(0, len(data), size=3):
            corrupt[pos] = int(rng.integers(0, 256))
        with open(path, "wb") as f:
            f.write(corrupt)
        try:
            read_caffemodel(path)
        except WeightsError as e:
            assert "c.caffemodel" in str(e)
            failures += 1
    assert failures > 0


def test_missing_and_empty_files(tmp_path) -> None:
    with pytest.raises(WeightsError, match=r"Could not open file .*nope\.caffemodel"):
        read_caffemodel(str(tmp_path / "nope.caffemodel"))
    empty = tmp_path / "empty.caffemodel"
    empty.write_bytes(b"")
    assert read_caffemodel(str(empty)).layers == []


@pytest.mark.slow
def test_file_over_64_megabytes(tmp_path) -> None:
    net = pb.NetParameter(name="big")
    net.layer.add(name="fc", type="InnerProduct")
    weights = np.arange(4096 * 4200, dtype=np.float32).reshape(4096, 4200)  # 68.8 MB
    path = str(tmp_path / "big.caffemodel")
    write_caffemodel(path, net, [[BlobArray.from_array(weights)]])
    assert os.path.getsize(path) > 64 * 2**20
    blob = read_caffemodel(path).layers[0].blobs[0]
    assert blob.shape == weights.shape
    assert np.array_equal(blob.reshaped(), weights)


def test_solverstate_round_trip_bit_for_bit(tmp_path) -> None:
    rng = np.random.default_rng(3)
    history = [rng.standard_normal(s).astype(np.float32) for s in [(5, 3, 3, 3), (5,), (1,), ()]]
    path = str(tmp_path / "lenet_iter_100.solverstate")
    write_solverstate(path, 100, 2, "lenet_iter_100.caffemodel", history)
    reference = pb.SolverState(iter=100, learned_net="lenet_iter_100.caffemodel", current_step=2)
    for h in history:
        proto = reference.history.add()
        for d in h.shape:  # no shape message at all for the 0-axis blob, as Caffe writes it
            proto.shape.dim.append(d)
        proto.data.extend(h.reshape(-1))
    assert Path(path).read_bytes() == reference.SerializeToString()
    state, blobs = read_solverstate(path)
    assert (state.iter, state.current_step, state.learned_net) == (
        100,
        2,
        "lenet_iter_100.caffemodel",
    )
    assert len(state.history) == 0
    for got, want in zip(blobs, history):
        assert got.shape == want.shape
        assert got.data.tobytes() == want.tobytes()


def test_solverstate_with_zero_iter_still_writes_fields(tmp_path) -> None:
    path = str(tmp_path / "s.solverstate")
    write_solverstate(path, 0, 0, "", [])
    reference = pb.SolverState(iter=0, learned_net="", current_step=0)
    assert Path(path).read_bytes() == reference.SerializeToString() == b"\x08\x00\x12\x00\x20\x00"


def test_mean_binaryproto_legacy_and_current(tmp_path) -> None:
    mean = np.linspace(0, 255, 3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    path = str(tmp_path / "mean.binaryproto")
    write_blobproto(path, mean, legacy4d=True)
    reference = pb.BlobProto(num=1, channels=3, height=4, width=5)
    reference.data.extend(mean.reshape(-1))
    assert Path(path).read_bytes() == reference.SerializeToString()
    blob = read_blobproto(path)
    assert blob.legacy and blob.shape == (1, 3, 4, 5)
    np.testing.assert_array_equal(blob.data, mean.reshape(-1))
    write_blobproto(path, mean)
    blob = read_blobproto(path)
    assert not blob.legacy and blob.shape == (3, 4, 5)


def test_is_hdf5(tmp_path) -> None:
    import h5py

    h5 = tmp_path / "w.caffemodel.h5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("data/conv/0", data=np.zeros(3, np.float32))
    assert is_hdf5(str(h5))
    with_userblock = tmp_path / "ub.h5"
    with h5py.File(with_userblock, "w", userblock_size=1024) as f:
        f.create_dataset("x", data=np.zeros(1))
    assert is_hdf5(str(with_userblock))
    with pytest.raises(WeightsError, match=r"w\.caffemodel\.h5 is an HDF5 file"):
        read_caffemodel(str(h5))
    proto = tmp_path / "w.caffemodel"
    proto.write_bytes(pb.NetParameter(name="n").SerializeToString())
    assert not is_hdf5(str(proto))
    with pytest.raises(WeightsError, match="Could not open file"):
        is_hdf5(str(tmp_path / "missing.h5"))


def test_default_arrays_are_private_and_copy_false_gives_read_only_views(tmp_path) -> None:
    net = text_format.Parse(NET_TEXT, pb.NetParameter())
    path = str(tmp_path / "m.caffemodel")
    write_caffemodel(path, net, _tiny_blobs(), write_diff=True)
    owned = read_caffemodel(path).layers[1].blobs[0]
    assert owned.data.flags.writeable and owned.data.flags.aligned and owned.data.flags.owndata
    owned.data[0] = 42.0  # a private copy: the file is untouched
    views = read_caffemodel(path, copy=False).layers[1].blobs[0]
    assert not views.data.flags.writeable and not views.diff.flags.writeable
    assert views.data[0] != 42.0
    np.testing.assert_array_equal(views.data[1:], owned.data[1:])


def test_non_utf8_layer_name_is_kept_escaped(tmp_path) -> None:
    path = tmp_path / "odd.caffemodel"
    path.write_bytes(encode_len_field(100, encode_len_field(1, b"conv\xff")))
    assert read_caffemodel(str(path)).layers[0].name == "conv\\xff"
