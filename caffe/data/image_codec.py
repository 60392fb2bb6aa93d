"""Image files and encoded bytes <-> C×H×W uint8 arrays in OpenCV's conventions, via Pillow.

Caffe reads images with OpenCV, so every image that enters a net (ImageData, encoded Datums,
convert_imageset) is **BGR** for colour and single-channel for grey, stored channel-major.
OpenCV also applies the EXIF orientation tag, which we do too. Pillow is an optional dependency:
whatever needs it raises a CaffeError saying so when it is missing. Colour JPEGs are decoded by
simplejpeg instead when it is installed, with the same pixels and without the GIL (jpeg_fast.py).

    decode_image(data, color=None) -> (C, H, W) uint8     color: True 3 ch, False 1 ch, None native
    read_image(path, color=True, height=0, width=0)       resized (bilinear) when both are > 0
    encode_image(chw, ext) -> bytes                       'png', 'jpg', ... from a C×H×W array
    join_root(root_folder, path)                          Caffe's root_folder + path rule
"""

from __future__ import annotations

import io
import os

import numpy as np

from caffe.data import jpeg_fast
from caffe.errors import CaffeError

_FORMATS = {
    "jpg": "JPEG",
    "jpeg": "JPEG",
    "png": "PNG",
    "bmp": "BMP",
    "tif": "TIFF",
    "tiff": "TIFF",
    "ppm": "PPM",
    "pgm": "PPM",
    "webp": "WEBP",
}
_GREY_MODES = {"1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"}


def pillow(purpose: str):  # type: ignore[no-untyped-def]
    """PIL.Image, or a CaffeError saying that `purpose` needs Pillow."""
    try:
        from PIL import Image
    except ImportError:
        raise CaffeError(
            f"{purpose} needs the Pillow package to decode images (pip install Pillow)"
        ) from None
    return Image


def _grey_array(image) -> np.ndarray:  # type: ignore[no-untyped-def]
    if image.mode in ("I;16", "I;16B", "I;16L", "I;16N"):
        # 16-bit grey: OpenCV's 8-bit read keeps the high byte.
        return (np.asarray(image, dtype=np.uint16) >> 8).astype(np.uint8)
    return np.asarray(image.convert("L"), dtype=np.uint8)


_ORIENTATION = 0x0112  # the EXIF tag


def _to_chw(  # type: ignore[no-untyped-def]
    image, color: bool | None, height: int, width: int, contiguous: bool
) -> np.ndarray:
    """Orient, convert to colour or grey, resize (in OpenCV's read-then-resize order), to CHW.
    `contiguous=False` returns the BGR C×H×W as a view of the decoded H×W×RGB pixels, with
    no copy: what the data layers crop and subtract the mean from (caffe/data/transformer.py)."""
    from PIL import Image, ImageOps

    if image.getexif().get(_ORIENTATION, 1) != 1:  # exif_transpose copies even when upright
        image = ImageOps.exif_transpose(image)
    if color is None:
        color = image.mode not in _GREY_MODES
    if not color:
        image = Image.fromarray(_grey_array(image))
    elif image.mode != "RGB":  # convert() copies even when the mode is already right
        image = image.convert("RGB")
    if height > 0 and width > 0 and image.size != (width, height):
        image = image.resize((width, height), Image.Resampling.BILINEAR)
    pixels = np.asarray(image, dtype=np.uint8)
    chw = pixels[np.newaxis] if not color else pixels[:, :, ::-1].transpose(2, 0, 1)
    return np.ascontiguousarray(chw) if contiguous else chw  # RGB -> BGR, HWC -> CHW


def decode_image(
    data: bytes,
    color: bool | None = None,
    height: int = 0,
    width: int = 0,
    where: str = "image",
    contiguous: bool = True,
) -> np.ndarray:
    """Decode encoded image bytes to C×H×W uint8 (BGR or grey); see _to_chw for `contiguous`.
    Colour JPEGs go through simplejpeg when it can decode them as Pillow would (jpeg_fast.py)."""
    if color is not False and not (height > 0 and width > 0):
        try:
            bgr = jpeg_fast.decode_bgr(data)
        except ValueError as e:
            raise CaffeError(f"{where}: cannot decode image data: {e}") from None
        if bgr is not None:
            chw = bgr.transpose(2, 0, 1)
            return np.ascontiguousarray(chw) if contiguous else chw
    Image = pillow(f"decoding {where}")
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            return _to_chw(image, color, height, width, contiguous)
    except (OSError, ValueError) as e:
        raise CaffeError(f"{where}: cannot decode image data: {e}") from None


def read_image(
    path: str, color: bool | None = True, height: int = 0, width: int = 0, contiguous: bool = True
) -> np.ndarray:
    """Read an image file to C×H×W uint8 (BGR or grey), resized when height and width are > 0;
    see _to_chw for `contiguous`."""
    if color is not False and not (height > 0 and width > 0) and jpeg_fast.enabled():
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise CaffeError(f"Could not open or find file {path}") from None
        except OSError as e:
            raise CaffeError(f"{path}: cannot read: {e.strerror or e}") from None
        return decode_image(data, color, where=path, contiguous=contiguous)
    Image = pillow(f"reading {path}")
    try:
        with Image.open(path) as image:
            image.load()
            return _to_chw(image, color, height, width, contiguous)
    except FileNotFoundError:
        raise CaffeError(f"Could not open or find file {path}") from None
    except (OSError, ValueError) as e:
        raise CaffeError(f"{path}: cannot decode image: {e}") from None


def encode_image(chw: np.ndarray, ext: str) -> bytes:
    """Encode a C×H×W uint8 array (BGR or grey) as a `ext` file ('png', 'jpg', ...)."""
    Image = pillow("encoding images")
    kind = _FORMATS.get(ext.lower().lstrip("."))
    if kind is None:
        raise CaffeError(f"Unknown image encoding '{ext}'. Known: {', '.join(sorted(_FORMATS))}")
    if chw.ndim != 3 or chw.shape[0] not in (1, 3):
        raise CaffeError(f"cannot encode an image of shape {chw.shape}: need 1 or 3 channels")
    if chw.shape[0] == 1:
        image = Image.fromarray(np.ascontiguousarray(chw[0], dtype=np.uint8))
    else:
        hwc = np.ascontiguousarray(chw.transpose(1, 2, 0)[:, :, ::-1], dtype=np.uint8)
        image = Image.fromarray(hwc)
    buffer = io.BytesIO()
    image.save(buffer, format=kind)
    return buffer.getvalue()


def join_root(root_folder: str, path: str) -> str:
    """Caffe concatenates root_folder and the listed path; a missing separator is added."""
    if not root_folder or root_folder.endswith(("/", os.sep)):
        return root_folder + path
    return root_folder + os.sep + path
