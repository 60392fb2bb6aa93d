"""JPEG decoding that releases the GIL for all of its work: simplejpeg (libjpeg-turbo), used
by caffe/data/image_codec.py when the package is installed (the `images` extra) and the image is
one it decodes exactly as the Pillow path does.

Note [fast JPEG]. Pillow spends about a quarter of a 256×256 JPEG's decode in Python (marker
parsing, the decoder's read loop, `tobytes` for numpy), holding the GIL, so the data layers'
decode threads (caffe/data/threads.py) scale only ~1.3× on two cores with it; simplejpeg
decodes in one C call without the GIL (~1.9×) and is faster alone too, straight into BGR. Both
wrap libjpeg-turbo with the same defaults (accurate integer DCT, fancy upsampling), so the
pixels are the same (tests/caffe/data/test_jpeg_fast.py holds it). Used only where that is so:
colour output of a colour JPEG with no EXIF data (Pillow then applies the orientation) and no
resize; anything else (grey, CMYK, EXIF, other formats, resizing) goes to Pillow.
CAFFE_JPEG_DECODER=pillow turns it off.
"""

from __future__ import annotations

import os

import numpy as np

try:
    import simplejpeg
except ImportError:  # optional: Pillow decodes everything then
    simplejpeg = None

_JPEG_MAGIC = b"\xff\xd8"
_EXIF_SCAN_BYTES = 1 << 16  # the APP1 Exif segment sits at the front, before the image data


def enabled() -> bool:
    return simplejpeg is not None and os.environ.get("CAFFE_JPEG_DECODER", "auto") != "pillow"


def decode_bgr(data: bytes) -> np.ndarray | None:
    """H×W×3 BGR uint8 of a colour JPEG, or None where Pillow must decode it (see Note [fast
    JPEG]); raises ValueError for a JPEG that libjpeg-turbo cannot decode."""
    if not enabled() or data[:2] != _JPEG_MAGIC or b"Exif\x00" in data[:_EXIF_SCAN_BYTES]:
        return None
    try:
        _, _, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return None  # let Pillow say what is wrong with it
    if colorspace.lower() not in ("ycbcr", "rgb"):
        return None  # grey, CMYK, YCCK: Pillow's conversions
    return simplejpeg.decode_jpeg(data, colorspace="BGR")
