import sys

import numpy as np
import pytest

import caffe
from caffe import io
from caffe.proto import caffe_pb2


def test_caffe_io_is_the_module():
    assert caffe.io is io


def test_blobproto_to_array_legacy_and_shaped():
    legacy = caffe_pb2.BlobProto(num=1, channels=2, height=1, width=3, data=range(6))
    np.testing.assert_array_equal(io.blobproto_to_array(legacy), np.arange(6).reshape(1, 2, 1, 3))
    shaped = caffe_pb2.BlobProto(data=range(6), diff=[-x for x in range(6)])
    shaped.shape.dim.extend([3, 2])
    np.testing.assert_array_equal(io.blobproto_to_array(shaped), np.arange(6).reshape(3, 2))
    diff = io.blobproto_to_array(shaped, return_diff=True)
    np.testing.assert_array_equal(diff, -np.arange(6).reshape(3, 2))


def test_blobproto_without_shape_scalar_or_error():
    assert io.blobproto_to_array(caffe_pb2.BlobProto(data=[4.5])).shape == ()
    with pytest.raises(ValueError):
        io.blobproto_to_array(caffe_pb2.BlobProto(data=[1, 2]))


def test_array_blobproto_round_trip_with_diff():
    arr = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    blob = io.array_to_blobproto(arr, diff=arr * 2)
    assert list(blob.shape.dim) == [2, 3, 4] and not blob.HasField("num")
    np.testing.assert_array_equal(io.blobproto_to_array(blob), arr)
    np.testing.assert_array_equal(io.blobproto_to_array(blob, return_diff=True), arr * 2)


def test_blobprotovector_string_round_trip():
    arrays = [np.ones((2, 2), np.float32), np.arange(3, dtype=np.float32)]
    data = io.arraylist_to_blobprotovector_str(arrays)
    assert isinstance(data, bytes)
    back = io.blobprotovector_str_to_arraylist(data)
    assert len(back) == 2
    for a, b in zip(arrays, back):
        np.testing.assert_array_equal(a, b)


def test_array_to_datum_uint8_float_and_label():
    raw = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    datum = io.array_to_datum(raw)
    assert datum.data == raw.tobytes() and not datum.float_data and not datum.HasField("label")
    back = io.datum_to_array(datum)
    np.testing.assert_array_equal(back, raw)
    back[0, 0, 0] = 99  # writable, like pycaffe's copy
    floats = np.full((1, 2, 2), 0.5)
    datum = io.array_to_datum(floats, label=3)
    assert datum.label == 3 and not datum.data and list(datum.float_data) == [0.5] * 4
    assert (datum.channels, datum.height, datum.width) == (1, 2, 2)
    np.testing.assert_array_equal(io.datum_to_array(datum), floats)
    with pytest.raises(ValueError, match="Incorrect array shape"):
        io.array_to_datum(np.zeros((2, 2)))


def configured_transformer():
    t = io.Transformer({"data": (1, 3, 2, 2)})
    t.set_transpose("data", (2, 0, 1))
    t.set_channel_swap("data", (2, 1, 0))
    t.set_raw_scale("data", 255)
    t.set_mean("data", np.array([10.0, 20.0, 30.0]))
    t.set_input_scale("data", 0.5)
    return t


def test_preprocess_matches_hand_computation_and_deprocess_inverts_it():
    image = np.random.default_rng(1).uniform(0, 1, (2, 2, 3)).astype(np.float32)
    t = configured_transformer()
    out = t.preprocess("data", image)
    means = [10.0, 20.0, 30.0]
    assert out.shape == (3, 2, 2) and out.dtype == np.float32
    for c in range(3):
        for y in range(2):
            for x in range(2):
                rgb_channel = 2 - c  # channel swap (2, 1, 0) after HWC -> CHW
                expected = (image[y, x, rgb_channel] * 255 - means[c]) * 0.5
                assert out[c, y, x] == pytest.approx(expected, rel=1e-6)
    np.testing.assert_allclose(t.deprocess("data", out[np.newaxis]), image, rtol=1e-5)


def test_preprocess_resizes_to_the_input_size():
    t = io.Transformer({"data": (1, 1, 1, 4)})
    out = t.preprocess("data", np.array([[[0.0], [1.0]]]))
    # Half-pixel centres at -0.25, 0.25, 0.75, 1.25 of the 2-pixel row; past the border the
    # row reads its minimum, 0 (skimage's mode="constant" on the image scaled to [0, 1]).
    np.testing.assert_allclose(out[:, :, 0], [[0, 0.25, 0.75, 0.75]])


def test_transformer_argument_checks():
    t = io.Transformer({"data": (1, 3, 4, 4)})
    with pytest.raises(Exception, match="not one of the net inputs"):
        t.set_raw_scale("image", 1)
    with pytest.raises(Exception, match="Transpose order"):
        t.set_transpose("data", (1, 0))
    with pytest.raises(Exception, match="Channel swap"):
        t.set_channel_swap("data", (1, 0))
    with pytest.raises(ValueError, match="Mean channels"):
        t.set_mean("data", np.zeros(2))
    with pytest.raises(ValueError, match="Mean shape invalid"):
        t.set_mean("data", np.zeros((1, 3, 4, 4)))


def test_elementwise_mean_is_resized_to_the_input():
    t = io.Transformer({"data": (1, 2, 4, 4)})
    t.set_mean("data", np.stack([np.full((2, 2), 5.0), np.full((2, 2), 7.0)]))
    assert t.mean["data"].shape == (2, 4, 4)
    np.testing.assert_allclose(t.mean["data"][:, 0, 0], [5, 7])


def test_resize_image_orders_and_constant_images():
    pytest.importorskip("scipy")
    row = np.array([[[1.0], [5.0]]], np.float32)  # 1×2×1, centres at -0.25, 0.25, 0.75, 1.25
    np.testing.assert_allclose(io.resize_image(row, (1, 4))[0, :, 0], [1, 2, 4, 4])
    np.testing.assert_allclose(io.resize_image(row, (1, 4), interp_order=0)[0, :, 0], [1, 1, 5, 5])
    # Two channels: scipy.ndimage.zoom, which puts corners on corners (0, 1/3, 2/3, 1).
    pair = np.concatenate([row, 10 * row], axis=2)
    np.testing.assert_allclose(io.resize_image(pair, (1, 4))[0], [[1, 10], [7 / 3, 70 / 3],
                                                                   [11 / 3, 110 / 3], [5, 50]],
                               rtol=1e-6)  # fmt: skip
    constant = np.full((3, 3, 2), 0.25, np.float32)
    out = io.resize_image(constant, (5, 7))
    assert out.shape == (5, 7, 2) and np.all(out == 0.25)
    same = io.resize_image(row, (1, 2))
    assert same is not row and np.array_equal(same, row)
    smooth = io.resize_image(np.linspace(0, 1, 12).reshape(3, 4, 1), (6, 8), interp_order=2)
    assert smooth.shape == (6, 8, 1) and smooth.dtype == np.float32
    with pytest.raises(ValueError, match="spline order 0 to 5, not 6"):
        io.resize_image(row, (2, 2), interp_order=6)


def pycaffe_resize_image(im, new_dims, interp_order, anti_aliasing=False):
    """What BVLC Caffe 1.0's caffe.io.resize_image computed, from skimage and scipy
    themselves: skimage's resize as it was then (no anti-aliasing; today's skimage smooths
    before shrinking unless told not to) for 1 or 3 channels, scipy's zoom for the rest."""
    from scipy.ndimage import zoom
    from skimage.transform import resize

    if im.shape[-1] in (1, 3):
        low, high = im.min(), im.max()
        unit = resize((im - low) / (high - low), new_dims, order=interp_order, mode="constant",
                      anti_aliasing=anti_aliasing)  # fmt: skip
        return (unit * (high - low) + low).astype(np.float32)
    scale = tuple(np.array(new_dims, dtype=float) / np.array(im.shape[:2]))
    return zoom(im, (*scale, 1), order=interp_order).astype(np.float32)


SIZES = pytest.mark.parametrize(
    "shape, new_dims",
    [((5, 7), (11, 16)), ((4, 4), (9, 9)), ((12, 9), (5, 4)), ((30, 20), (7, 9)),
     ((6, 6), (13, 4))],
    ids=["enlarge", "enlarge-square", "shrink", "shrink-3x", "mixed"],
)  # fmt: skip


@pytest.mark.parametrize("channels", [1, 2, 3, 4, 6])
@pytest.mark.parametrize("interp_order", [0, 1, 2, 3, 5])
@SIZES
@pytest.mark.parametrize("anti_aliasing", [False, True], ids=["bvlc", "anti-aliased"])
def test_resize_image_equals_pycaffes(channels, interp_order, shape, new_dims, anti_aliasing):
    pytest.importorskip("skimage")
    rng = np.random.default_rng(channels * 100 + interp_order)
    image = (rng.random((*shape, channels)) * 200 - 50).astype(np.float32)
    out = io.resize_image(image, new_dims, interp_order, anti_aliasing=anti_aliasing)
    expected = pycaffe_resize_image(image, new_dims, interp_order,
                                    anti_aliasing and channels in (1, 3))  # fmt: skip
    assert out.shape == (*new_dims, channels) and out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-6 * 250)


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("interp_order", [0, 1, 3])
@SIZES
@pytest.mark.parametrize("anti_aliasing", [False, True], ids=["bvlc", "anti-aliased"])
def test_resize_image_without_scikit_image_computes_the_same(
    monkeypatch, channels, interp_order, shape, new_dims, anti_aliasing
):
    pytest.importorskip("skimage")
    rng = np.random.default_rng(channels * 10 + interp_order)
    image = (rng.random((*shape, channels)) * 255).astype(np.float32)
    expected = io.resize_image(image, new_dims, interp_order, anti_aliasing=anti_aliasing)
    monkeypatch.setitem(sys.modules, "skimage.transform", None)  # as if not installed
    out = io.resize_image(image, new_dims, interp_order, anti_aliasing=anti_aliasing)
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-6 * 255)


def test_preprocess_resizes_as_bvlc_did():
    # Shrinking 3x: BVLC-era values (no anti-aliasing), not today's scikit-image default.
    pytest.importorskip("skimage")
    rng = np.random.default_rng(5)
    image = rng.random((60, 45, 3)).astype(np.float32)
    transformer = io.Transformer({"data": (1, 3, 20, 15)})
    transformer.set_transpose("data", (2, 0, 1))
    got = transformer.preprocess("data", image)
    bvlc = pycaffe_resize_image(image, (20, 15), 1).transpose(2, 0, 1)
    today = pycaffe_resize_image(image, (20, 15), 1, anti_aliasing=True).transpose(2, 0, 1)
    np.testing.assert_allclose(got, bvlc, rtol=0, atol=1e-6)
    assert np.abs(got - today).max() > 0.05


def test_oversample_ten_crops():
    image = np.arange(4 * 5 * 2, dtype=np.float32).reshape(4, 5, 2)
    crops = io.oversample([image, image + 100], (2, 3))
    assert crops.shape == (20, 2, 3, 2)
    # Corners (0,0), (0,2), (2,0), (2,2); centre int(2-1), int(2.5-1.5) = (1, 1).
    windows = [(0, 0), (0, 2), (2, 0), (2, 2), (1, 1)]
    for k, (top, left) in enumerate(windows):
        expected = image[top : top + 2, left : left + 3]
        np.testing.assert_array_equal(crops[k], expected)
        np.testing.assert_array_equal(crops[5 + k], expected[:, ::-1])
        np.testing.assert_array_equal(crops[10 + k], expected + 100)


def test_load_image_colour_and_grey(tmp_path):
    Image = pytest.importorskip("PIL.Image")
    rgb = np.random.default_rng(2).integers(0, 256, (3, 4, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(tmp_path / "rgb.png")
    colour = io.load_image(str(tmp_path / "rgb.png"))
    assert colour.shape == (3, 4, 3) and colour.dtype == np.float32
    np.testing.assert_allclose(colour, rgb / 255.0, rtol=1e-6)
    grey = io.load_image(str(tmp_path / "rgb.png"), color=False)
    expected = (0.2125 * rgb[..., 0] + 0.7154 * rgb[..., 1] + 0.0721 * rgb[..., 2]) / 255.0
    np.testing.assert_allclose(grey[:, :, 0], expected, rtol=1e-5)
    Image.fromarray(rgb[:, :, 0]).save(tmp_path / "grey.png")
    tiled = io.load_image(str(tmp_path / "grey.png"))
    assert tiled.shape == (3, 4, 3)
    np.testing.assert_allclose(tiled[:, :, 2], rgb[:, :, 0] / 255.0, rtol=1e-6)
