"""The fast JPEG path (caffe/data/jpeg_fast.py, simplejpeg) gives Pillow's pixels exactly, and
leaves to Pillow what it would not decode the same way."""

from __future__ import annotations

import io

import numpy as np
import pytest

from caffe.data import image_codec, jpeg_fast

pytest.importorskip("simplejpeg")
Image = pytest.importorskip("PIL.Image")


def photo(height: int, width: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    rgb = np.stack([np.sin(x / (7 + c * 3)) * 90 + np.cos(y / (5 + c)) * 60 + 120
                    for c in range(3)], -1)  # fmt: skip
    rgb += rng.normal(0, 12, rgb.shape)
    return np.clip(rgb, 0, 255).astype(np.uint8)


def encode(rgb: np.ndarray, mode: str = "RGB", **options) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(rgb).convert(mode).save(buffer, format="JPEG", **options)
    return buffer.getvalue()


def pillow_chw(data: bytes, color) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        image.load()
        return image_codec._to_chw(image, color, 0, 0, True)


CASES = {
    "4:2:0": {"quality": 90},
    "4:4:4": {"quality": 95, "subsampling": 0},
    "4:2:2": {"quality": 75, "subsampling": 1},
    "progressive": {"quality": 85, "progressive": True},
    "optimized": {"quality": 60, "optimize": True},
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize(("height", "width"), [(256, 256), (37, 61), (1, 9)])
@pytest.mark.parametrize("color", [True, None])
def test_the_fast_path_decodes_what_pillow_decodes(case, height, width, color):
    data = encode(photo(height, width, len(case)), **CASES[case])
    assert jpeg_fast.decode_bgr(data) is not None  # it took the fast path
    fast = image_codec.decode_image(data, color)
    np.testing.assert_array_equal(fast, pillow_chw(data, color))
    assert fast.flags.c_contiguous and fast.shape == (3, height, width)


def test_what_the_fast_path_leaves_to_pillow(monkeypatch):
    rgb = photo(24, 32, 1)
    grey = encode(rgb, "L")
    assert jpeg_fast.decode_bgr(grey) is None  # grey JPEG: Pillow's conversions
    np.testing.assert_array_equal(image_codec.decode_image(grey, True), pillow_chw(grey, True))
    cmyk = encode(rgb, "CMYK")
    assert jpeg_fast.decode_bgr(cmyk) is None
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90°": Pillow turns it upright, as OpenCV does
    rotated = encode(rgb, exif=exif.tobytes())
    assert jpeg_fast.decode_bgr(rotated) is None
    assert image_codec.decode_image(rotated).shape == (3, 32, 24)
    png = io.BytesIO()
    Image.fromarray(rgb).save(png, format="PNG")
    assert jpeg_fast.decode_bgr(png.getvalue()) is None
    plain = encode(rgb)
    monkeypatch.setenv("CAFFE_JPEG_DECODER", "pillow")
    assert jpeg_fast.decode_bgr(plain) is None and not jpeg_fast.enabled()


def test_a_broken_jpeg_fails_with_the_place_named():
    data = encode(photo(16, 16, 2))
    broken = data[: len(data) // 2]  # the header survives, the entropy-coded data is cut
    with pytest.raises(Exception, match="record 7: cannot decode image data"):
        image_codec.decode_image(broken, where="record 7")
