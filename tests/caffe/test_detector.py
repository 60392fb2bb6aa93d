import sys
import types

import numpy as np
import pytest

import caffe
from caffe import io
from caffe.errors import CaffeError
from tests.caffe.deploy_fixtures import (
    CHANNELS,
    CLASSES,
    SIZE,
    numpy_forward,
    preprocess,
    write_deploy_net,
    write_png,
)

MEAN = np.array([100.0, 120.0, 140.0])  # BGR, in ×255 units: the net's side of the swap
RAW_SCALE, INPUT_SCALE, SWAP = 255.0, 0.02, (2, 1, 0)


@pytest.fixture(scope="module")
def deploy_net(tmp_path_factory):
    return write_deploy_net(tmp_path_factory.mktemp("detector"))


def detector(deploy_net, context_pad=None, mean=MEAN):
    return caffe.Detector(
        *deploy_net,
        mean=mean,
        input_scale=INPUT_SCALE,
        raw_scale=RAW_SCALE,
        channel_swap=SWAP,
        context_pad=context_pad,
    )


@pytest.fixture
def images(tmp_path):
    """Two PNG files of different sizes with random pixels."""
    rng = np.random.default_rng(0)
    return [
        write_png(tmp_path / f"im{i}.png", rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        for i, (h, w) in enumerate([(20, 24), (16, 16)])
    ]


def coded_image(size=20):
    """A size×size×3 image whose pixel (y, x, c) holds y + x/100 + c/10000 (all distinct)."""
    y, x, c = np.meshgrid(np.arange(size), np.arange(size), np.arange(3), indexing="ij")
    return (y + x / 100 + c / 10000).astype(np.float32)


def test_detect_windows_equals_forward_of_the_explicit_crops(deploy_net, images):
    det = detector(deploy_net)
    assert isinstance(det, caffe.Net) and det.phase == caffe.TEST
    windows = [np.array([[0, 0, 8, 8], [2, 3, 20, 24], [5, 1, 9, 17]]), np.array([[4, 4, 12, 14]])]
    detections = det.detect_windows(list(zip(images, windows)))
    assert [d["filename"] for d in detections] == [images[0]] * 3 + [images[1]]
    expected_crops = []
    for name, image_windows in zip(images, windows):
        image = io.load_image(name)
        for ymin, xmin, ymax, xmax in image_windows:
            crop = io.resize_image(image[ymin:ymax, xmin:xmax], (SIZE, SIZE))
            expected_crops.append(preprocess(crop, MEAN, RAW_SCALE, INPUT_SCALE, SWAP))
    expected = numpy_forward(det, np.stack(expected_crops))
    for d, window, scores in zip(detections, [*windows[0], *windows[1]], expected):
        np.testing.assert_array_equal(d["window"], window)
        assert d["prediction"].shape == (CLASSES,)
        np.testing.assert_allclose(d["prediction"], scores, rtol=1e-5, atol=1e-6)
    assert not np.allclose(expected[0], expected[1])


def test_context_crop_geometry_on_a_coded_image(deploy_net):
    # Input 8×8 with context_pad 2: windows are enlarged ×2 about their centre. A 4-pixel window
    # (inclusive size) becomes a 9-pixel box warped by 8/9, so the kept pixels need no resize.
    det = detector(deploy_net, context_pad=2)
    im = coded_image()
    # Inside: box rows/cols 2..10, all in the image; the crop is im[2:10, 2:10].
    np.testing.assert_array_equal(det.crop(im, np.array([4, 4, 7, 7])), im[2:10, 2:10])
    # Top-left corner: box -2..6, so round(2·8/9) = 2 mean rows/cols, then im[0:6, 0:6].
    crop = det.crop(im, np.array([0, 0, 3, 3]))
    assert crop.shape == (SIZE, SIZE, CHANNELS)
    np.testing.assert_array_equal(crop[2:, 2:], im[0:6, 0:6])
    mean_rgb = np.broadcast_to(MEAN[::-1] / RAW_SCALE, (SIZE, 2, CHANNELS))
    np.testing.assert_allclose(crop[:, :2], mean_rgb, rtol=1e-6)
    np.testing.assert_allclose(crop[:2, :], mean_rgb.transpose(1, 0, 2), rtol=1e-6)
    # Bottom-right corner: box 14..22 clipped to 14..20, warped to 6 pixels, mean after.
    crop = det.crop(im, np.array([16, 16, 19, 19]))
    np.testing.assert_array_equal(crop[:6, :6], im[14:20, 14:20])
    np.testing.assert_allclose(crop[6:, :], mean_rgb.transpose(1, 0, 2), rtol=1e-6)
    np.testing.assert_allclose(crop[:, 6:], mean_rgb, rtol=1e-6)
    # A larger window: box 1..17 (17 pixels) is warped to the 8×8 crop.
    crop = det.crop(im, np.array([5, 5, 12, 12]))
    np.testing.assert_allclose(crop, io.resize_image(im[1:17, 1:17], (SIZE, SIZE)), rtol=1e-6)


def test_context_padding_preprocesses_to_zero(deploy_net):
    det = detector(deploy_net, context_pad=2)
    np.testing.assert_allclose(det.crop_mean.reshape(-1), MEAN[::-1] / RAW_SCALE, rtol=1e-6)
    crop = det.crop(coded_image(), np.array([0, 0, 3, 3]))
    net_input = det.transformer.preprocess(det.inputs[0], crop)
    np.testing.assert_allclose(net_input[:, :2, :], 0, atol=1e-5)
    np.testing.assert_allclose(net_input[:, :, :2], 0, atol=1e-5)
    assert np.abs(net_input[:, 2:, 2:]).min() > 0


def test_context_padding_without_a_mean_is_zero(deploy_net):
    det = detector(deploy_net, context_pad=2, mean=None)
    np.testing.assert_array_equal(det.crop_mean, np.zeros((SIZE, SIZE, CHANNELS)))
    crop = det.crop(coded_image() + 1, np.array([16, 16, 19, 19]))
    assert (crop[6:] == 0).all() and (crop[:6, :6] >= 1).all()


def test_pixel_mean_is_mapped_back_to_image_space(deploy_net):
    mean = np.random.default_rng(1).random((CHANNELS, SIZE, SIZE)) * 255
    det = detector(deploy_net, context_pad=1, mean=mean)
    expected = mean.transpose(1, 2, 0)[:, :, ::-1] / RAW_SCALE
    np.testing.assert_allclose(det.crop_mean, expected, rtol=1e-6)
    det.configure_crop(None)
    assert det.context_pad is None and det.crop_mean is None
    im = coded_image()
    np.testing.assert_array_equal(det.crop(im, np.array([1, 2, 5, 9])), im[1:5, 2:9])


def test_detect_windows_with_context_pad_uses_the_context_crop(deploy_net, tmp_path):
    pixels = np.random.default_rng(2).integers(0, 256, (20, 20, 3), dtype=np.uint8)
    name = write_png(tmp_path / "im.png", pixels)
    det = detector(deploy_net, context_pad=2)
    [detection] = det.detect_windows([(name, np.array([[4, 4, 7, 7]]))])
    crop = io.load_image(name)[2:10, 2:10]  # as in the coded-image test
    expected = numpy_forward(det, preprocess(crop, MEAN, RAW_SCALE, INPUT_SCALE, SWAP)[None])
    np.testing.assert_allclose(detection["prediction"], expected[0], rtol=1e-5, atol=1e-6)


FULLY_CONVOLUTIONAL = """
name: "fcn"
layer {{ name: "input" type: "Input" top: "data"
        input_param {{ shape {{ dim: 2 dim: {channels} dim: {size} dim: {size} }} }} }}
layer {{ name: "score" type: "Convolution" bottom: "data" top: "score"
        convolution_param {{ num_output: {classes} kernel_size: {size}
                            weight_filler {{ type: "gaussian" std: 0.1 }} }} }}
"""


@pytest.mark.parametrize("channels", [1, 3])
def test_prediction_is_a_vector_for_a_convolutional_head(channels, tmp_path, images):
    # (n, classes, 1, 1) outputs become one vector per window; a grey net gets grey images.
    model = tmp_path / "fcn.prototxt"
    model.write_text(FULLY_CONVOLUTIONAL.format(channels=channels, size=SIZE, classes=CLASSES))
    weights = str(tmp_path / "fcn.caffemodel")
    caffe.Net(str(model), caffe.TEST).save(weights)
    det = caffe.Detector(str(model), weights)
    detections = det.detect_windows([(images[1], np.array([[0, 0, SIZE, SIZE]] * 3))])
    assert [d["prediction"].shape for d in detections] == [(CLASSES,)] * 3
    image = io.load_image(images[1], color=channels == 3)[:SIZE, :SIZE].transpose(2, 0, 1)
    weight = det.params["score"][0].data.reshape(CLASSES, -1)
    bias = det.params["score"][1].data
    np.testing.assert_allclose(
        detections[2]["prediction"], weight @ image.reshape(-1) + bias, rtol=1e-5, atol=1e-5
    )


def test_bad_windows_and_images_are_named(deploy_net, images, tmp_path):
    det = detector(deploy_net)
    with pytest.raises(CaffeError, match="no images"):
        det.detect_windows([])
    with pytest.raises(CaffeError, match="no windows"):
        det.detect_windows([(images[0], np.zeros((0, 4)))])
    with pytest.raises(CaffeError, match=r"windows of .*im0.png have shape \(2, 3\)"):
        det.detect_windows([(images[0], np.zeros((2, 3)))])
    with pytest.raises(CaffeError, match=r"\(10, 0, 21, 8\) is empty or outside the 20×24 image"):
        det.detect_windows([(images[0], np.array([[10, 0, 21, 8]]))])
    with pytest.raises(CaffeError, match="outside"):
        det.crop(coded_image(), np.array([5, 5, 5, 9]))
    with pytest.raises(CaffeError, match="non-integer"):
        det.crop(coded_image(), np.array([0.5, 0, 4, 4]))
    with pytest.raises(CaffeError, match=r"image has shape \(20, 20\)"):
        det.crop(coded_image()[:, :, 0], np.array([0, 0, 4, 4]))
    with pytest.raises(CaffeError, match=r"Could not open or find image .*missing\.png"):
        det.detect_windows([(str(tmp_path / "missing.png"), np.array([[0, 0, 4, 4]]))])
    with pytest.raises(CaffeError, match="context_pad 4 must be >= 0"):
        detector(deploy_net, context_pad=4)


def test_selective_search_needs_its_module(deploy_net, images, monkeypatch):
    det = detector(deploy_net)
    monkeypatch.setitem(sys.modules, "selective_search_ijcv_with_python", None)
    with pytest.raises(ImportError, match="'selective_search_ijcv_with_python' module") as error:
        det.detect_selective_search(images)
    assert "detect_windows works without it" in str(error.value)
    # With the module present, its windows go to detect_windows.
    calls = []

    def get_windows(fnames, cmd):
        calls.append((fnames, cmd))
        return [np.array([[0, 0, 8, 8]]), np.array([[1, 1, 9, 9], [0, 0, 16, 16]])]

    fake = types.SimpleNamespace(get_windows=get_windows)
    monkeypatch.setitem(sys.modules, "selective_search_ijcv_with_python", fake)
    detections = det.detect_selective_search(images)
    assert calls == [(images, "selective_search_rcnn")]
    assert [d["filename"] for d in detections] == [images[0], images[1], images[1]]
