import numpy as np
import pytest
import torch

from caffe.data.transformer import DataTransformer, datum_to_chw
from caffe.errors import CaffeError, LayerError
from caffe.formats.weights_io import write_blobproto
from caffe.proto import caffe_pb2
from tests.caffe.data_fixtures import make_datum

TRAIN, TEST = caffe_pb2.TRAIN, caffe_pb2.TEST


def transformer(phase=TRAIN, seed=0, **fields):
    param = caffe_pb2.TransformationParameter(**fields)
    return DataTransformer(param, phase, torch.Generator().manual_seed(seed), where="Layer 'd'")


def random_batch(shape, seed=0):
    return torch.from_numpy(np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8))


def test_identity_without_parameters_converts_to_float():
    batch = random_batch((2, 3, 4, 5))
    out = transformer().transform(batch)
    assert out.dtype == torch.float32
    np.testing.assert_array_equal(out.numpy(), batch.numpy().astype(np.float32))


def test_float_input_is_not_modified_in_place():
    batch = torch.rand(2, 1, 3, 3)
    before = batch.clone()
    transformer(mean_value=[0.5], scale=3.0).transform(batch)
    assert torch.equal(batch, before)


def test_train_crop_and_mirror_pick_valid_windows_and_cover_every_offset():
    batch = random_batch((300, 2, 5, 6), seed=1)
    out = transformer(crop_size=3, mirror=True, seed=7).transform(batch).numpy()
    items = batch.numpy().astype(np.float32)
    offsets, flips = set(), 0
    for item, crop in zip(items, out):
        found = [
            (r, c, f)
            for r in range(3)
            for c in range(4)
            for f in (False, True)
            if np.array_equal(
                item[:, r : r + 3, c : c + 3][:, :, ::-1] if f else item[:, r : r + 3, c : c + 3],
                crop,
            )
        ]
        assert len(found) == 1
        offsets.add(found[0][:2])
        flips += found[0][2]
    assert offsets == {(r, c) for r in range(3) for c in range(4)}
    assert 100 < flips < 200


def test_same_generator_seed_same_output():
    batch = random_batch((8, 1, 6, 6))
    one = transformer(crop_size=4, mirror=True, seed=3).transform(batch)
    two = transformer(crop_size=4, mirror=True, seed=3).transform(batch)
    assert torch.equal(one, two)


def test_3d_mean_file_then_scale(tmp_path):
    mean = np.random.default_rng(2).uniform(0, 9, (2, 4, 4)).astype(np.float32)
    write_blobproto(str(tmp_path / "mean.binaryproto"), mean)
    batch = random_batch((3, 2, 4, 4))
    out = transformer(
        TEST, mean_file=str(tmp_path / "mean.binaryproto"), scale=0.25, crop_size=2
    ).transform(batch)
    expected = ((batch.numpy().astype(np.float32) - mean) * 0.25)[:, :, 1:3, 1:3]
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)


def test_shape_errors_name_the_layer(tmp_path):
    with pytest.raises(LayerError, match=r"'d'.*crop_size 5 is larger"):
        transformer(crop_size=5).transform(random_batch((1, 1, 4, 6)))
    with pytest.raises(LayerError, match=r"'d'.*1 mean_value or as many as channels"):
        transformer(mean_value=[1, 2]).transform(random_batch((1, 3, 2, 2)))
    write_blobproto(str(tmp_path / "m.binaryproto"), np.zeros((1, 3, 4, 4), np.float32), True)
    with pytest.raises(LayerError, match=r"'d'.*must match the uncropped"):
        transformer(mean_file=str(tmp_path / "m.binaryproto")).transform(random_batch((1, 3, 5, 4)))
    with pytest.raises(LayerError, match=r"'d'.*cannot read mean_file"):
        transformer(mean_file=str(tmp_path / "missing.binaryproto"))
    with pytest.raises(LayerError, match="force_color and force_gray"):
        transformer(force_color=True, force_gray=True)


def test_datum_to_chw_raw_float_and_bad_sizes():
    raw = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    np.testing.assert_array_equal(datum_to_chw(make_datum(raw)), raw)
    values = np.linspace(-1, 1, 6, dtype=np.float32).reshape(1, 2, 3)
    out = datum_to_chw(make_datum(values))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, values)
    bad = caffe_pb2.Datum(channels=1, height=2, width=2, data=b"abc")
    with pytest.raises(CaffeError, match="3 bytes of data for shape"):
        datum_to_chw(bad, where="record 'k'")


def test_datum_to_chw_decodes_encoded_images_as_asked():
    pytest.importorskip("PIL")
    from caffe.data.image_codec import encode_image

    bgr = np.random.default_rng(5).integers(0, 256, (3, 2, 3), dtype=np.uint8)
    datum = caffe_pb2.Datum(data=encode_image(bgr, "png"), encoded=True)
    np.testing.assert_array_equal(datum_to_chw(datum), bgr)
    grey = datum_to_chw(datum, force_gray=True)
    b, g, r = bgr.astype(np.float64)
    np.testing.assert_allclose(grey[0], 0.299 * r + 0.587 * g + 0.114 * b, atol=1.0)
    grey_datum = caffe_pb2.Datum(data=encode_image(bgr[:1], "png"), encoded=True)
    assert datum_to_chw(grey_datum).shape == (1, 2, 3)
    assert datum_to_chw(grey_datum, force_color=True).shape == (3, 2, 3)
