"""pycaffe's caffe.io: protobuf <-> numpy conversions, the input Transformer, image helpers.

Same names, arguments and results as pycaffe (docs/caffe_format.md §5.6). Differences of
means, not of behaviour: NumPy 2 APIs (tobytes/frombuffer) instead of tostring/fromstring;
images are loaded with Pillow instead of scikit-image; `resize_image` makes the scipy.ndimage
calls that pycaffe's makes directly or through skimage.transform.resize, so it needs scipy
but not scikit-image.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

import numpy as np

from caffe.data.image_codec import pillow
from caffe.proto import caffe_pb2

# Grey level of an RGB image as scikit-image's rgb2gray computes it (pycaffe's load_image).
_GREY_WEIGHTS = np.array([0.2125, 0.7154, 0.0721], dtype=np.float32)
_SIXTEEN_BIT_MODES = ("I;16", "I;16B", "I;16L", "I;16N")


# ----------------------------------------------------------------------------- protobuf


def blobproto_to_array(blob: caffe_pb2.BlobProto, return_diff: bool = False) -> np.ndarray:
    """The blob's data (or diff) as an array of its shape: legacy 4-D if any legacy dim is set."""
    values = np.array(blob.diff if return_diff else blob.data, dtype=np.float64)
    if any(blob.HasField(axis) for axis in ("num", "channels", "height", "width")):
        return values.reshape(blob.num, blob.channels, blob.height, blob.width)
    return values.reshape(tuple(blob.shape.dim))


def array_to_blobproto(arr: np.ndarray, diff: np.ndarray | None = None) -> caffe_pb2.BlobProto:
    """A BlobProto with `shape` set from the array and its values in `data` (and `diff`)."""
    arr = np.asarray(arr)
    blob = caffe_pb2.BlobProto()
    blob.shape.dim.extend(int(d) for d in arr.shape)
    blob.data.extend(arr.astype(np.float64).ravel().tolist())
    if diff is not None:
        blob.diff.extend(np.asarray(diff).astype(np.float64).ravel().tolist())
    return blob


def arraylist_to_blobprotovector_str(arraylist: Sequence[np.ndarray]) -> bytes:
    """A serialized BlobProtoVector holding one blob per array."""
    vector = caffe_pb2.BlobProtoVector()
    vector.blobs.extend(array_to_blobproto(arr) for arr in arraylist)
    return vector.SerializeToString()


def blobprotovector_str_to_arraylist(data: bytes) -> list[np.ndarray]:
    """The arrays of a serialized BlobProtoVector."""
    vector = caffe_pb2.BlobProtoVector()
    vector.ParseFromString(data)
    return [blobproto_to_array(blob) for blob in vector.blobs]


def array_to_datum(arr: np.ndarray, label: int | None = None) -> caffe_pb2.Datum:
    """A Datum from a C×H×W array: uint8 goes to `data` bytes, anything else to `float_data`."""
    if arr.ndim != 3:
        raise ValueError("Incorrect array shape.")
    datum = caffe_pb2.Datum()
    datum.channels, datum.height, datum.width = (int(d) for d in arr.shape)
    if arr.dtype == np.uint8:
        datum.data = np.ascontiguousarray(arr).tobytes()
    else:
        datum.float_data.extend(arr.astype(np.float64).ravel().tolist())
    if label is not None:
        datum.label = int(label)
    return datum


def datum_to_array(datum: caffe_pb2.Datum) -> np.ndarray:
    """A Datum's values as a C×H×W array: uint8 from `data`, float64 from `float_data`."""
    shape = (datum.channels, datum.height, datum.width)
    if len(datum.data):
        return np.frombuffer(datum.data, dtype=np.uint8).reshape(shape).copy()
    return np.array(datum.float_data, dtype=np.float64).reshape(shape)


# ----------------------------------------------------------------------------- Transformer


class Transformer:
    """Prepares H×W×K images for a net's input blobs, and maps net inputs back to images.

    `inputs` maps input names to their blob shapes (N, K, H, W). preprocess applies, in order:
    float32, resize to the blob's H×W, transpose, channel swap, ×raw_scale, −mean, ×input_scale.
    """

    def __init__(self, inputs: dict[str, Sequence[int]]) -> None:
        self.inputs = inputs
        self.transpose: dict[str, Sequence[int]] = {}
        self.channel_swap: dict[str, Sequence[int]] = {}
        self.raw_scale: dict[str, float] = {}
        self.mean: dict[str, np.ndarray] = {}
        self.input_scale: dict[str, float] = {}

    def _check_input(self, in_: str) -> None:
        if in_ not in self.inputs:
            raise Exception(f"{in_} is not one of the net inputs: {self.inputs}")

    def preprocess(self, in_: str, data: np.ndarray) -> np.ndarray:
        """An H×W×K image as the K×H×W array the input blob `in_` expects."""
        self._check_input(in_)
        caffe_in = np.asarray(data).astype(np.float32, copy=False)
        in_dims = tuple(self.inputs[in_][2:])
        if caffe_in.shape[:2] != in_dims:
            caffe_in = resize_image(caffe_in, in_dims)
        if in_ in self.transpose:
            caffe_in = caffe_in.transpose(self.transpose[in_])
        if in_ in self.channel_swap:
            caffe_in = caffe_in[list(self.channel_swap[in_]), :, :]
        if in_ in self.raw_scale:
            caffe_in = caffe_in * self.raw_scale[in_]
        if in_ in self.mean:
            caffe_in = caffe_in - self.mean[in_]
        if in_ in self.input_scale:
            caffe_in = caffe_in * self.input_scale[in_]
        return caffe_in.astype(np.float32, copy=False)  # float64 means or scales must not widen

    def deprocess(self, in_: str, data: np.ndarray) -> np.ndarray:
        """Invert preprocess (except the resize): a net input back to an H×W×K image."""
        self._check_input(in_)
        decaf_in = np.array(data, copy=True).squeeze()
        dtype = decaf_in.dtype
        if in_ in self.input_scale:
            decaf_in = decaf_in / self.input_scale[in_]
        if in_ in self.mean:
            decaf_in = decaf_in + self.mean[in_]
        if in_ in self.raw_scale:
            decaf_in = decaf_in / self.raw_scale[in_]
        if in_ in self.channel_swap:
            decaf_in = decaf_in[np.argsort(self.channel_swap[in_]), :, :]
        if in_ in self.transpose:
            decaf_in = decaf_in.transpose(np.argsort(self.transpose[in_]))
        return decaf_in.astype(dtype, copy=False)

    def set_transpose(self, in_: str, order: Sequence[int]) -> None:
        """Axis order for input `in_`, e.g. (2, 0, 1) for H×W×K -> K×H×W."""
        self._check_input(in_)
        if len(order) != len(self.inputs[in_]) - 1:
            raise Exception(
                "Transpose order needs to have the same number of dimensions as the input."
            )
        self.transpose[in_] = order

    def set_channel_swap(self, in_: str, order: Sequence[int]) -> None:
        """Channel order after transposing, e.g. (2, 1, 0) for RGB -> BGR."""
        self._check_input(in_)
        if len(order) != self.inputs[in_][1]:
            raise Exception(
                "Channel swap needs to have the same number of dimensions as the input channels."
            )
        self.channel_swap[in_] = order

    def set_raw_scale(self, in_: str, scale: float) -> None:
        """Multiply the raw input (e.g. 255 for images loaded in [0, 1]) before the mean."""
        self._check_input(in_)
        self.raw_scale[in_] = scale

    def set_mean(self, in_: str, mean: np.ndarray) -> None:
        """Subtract `mean`: per channel (K,) or per pixel (K×H×W, resized if H×W differ)."""
        self._check_input(in_)
        mean = np.asarray(mean)
        blob_shape = tuple(self.inputs[in_][1:])
        if mean.ndim == 1:
            if mean.shape[0] != blob_shape[0]:
                raise ValueError("Mean channels incompatible with input.")
            mean = mean[:, np.newaxis, np.newaxis]
        else:
            if mean.ndim == 2:
                mean = mean[np.newaxis]
            if mean.ndim != 3:
                raise ValueError("Mean shape invalid")
            if mean.shape != blob_shape:
                if mean.shape[0] != blob_shape[0]:
                    raise ValueError("Mean shape incompatible with input.")
                hwc = resize_image(mean.transpose(1, 2, 0), blob_shape[1:])
                mean = hwc.transpose(2, 0, 1)
        self.mean[in_] = mean

    def set_input_scale(self, in_: str, scale: float) -> None:
        """Multiply the mean-subtracted input (e.g. 0.017 for a normalised net)."""
        self._check_input(in_)
        self.input_scale[in_] = scale


# ----------------------------------------------------------------------------- images


def load_image(filename: str, color: bool = True) -> np.ndarray:
    """An image file as float32 in [0, 1]: H×W×3 RGB if `color`, else H×W×1 grey."""
    Image = pillow("caffe.io.load_image")
    with Image.open(filename) as image:
        image.load()
        if image.mode in _SIXTEEN_BIT_MODES:
            grey = np.asarray(image, dtype=np.float32) / 65535.0
        elif image.mode in ("1", "L", "LA"):
            grey = np.asarray(image.convert("L"), dtype=np.float32) / 255.0
        else:
            rgb = np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0
            if color:
                return rgb
            grey = rgb @ _GREY_WEIGHTS
    img = grey[:, :, np.newaxis]
    return np.tile(img, (1, 1, 3)) if color else img


def resize_image(
    im: np.ndarray, new_dims: Sequence[int], interp_order: int = 1, anti_aliasing: bool = False
) -> np.ndarray:
    """Resize an H×W×K image to new_dims (height, width) with spline interpolation of order
    `interp_order` (0 nearest, 1 linear, 3 cubic; 0 to 5); float32 result, as BVLC Caffe 1.0's
    pycaffe computed it:

    - K = 1 or 3: scikit-image's `resize(..., mode="constant")` of the image scaled to
      [0, 1], then scaled back. Pixel centres map half-pixel to half-pixel, points past the
      border read zeros of the scaled image (the image minimum), so an enlarged image's
      border pixels lean towards the minimum; the result is clipped to the image's range.
      By default without anti-aliasing, as the scikit-image of BVLC's time resized (since
      0.19 it smooths before shrinking unless told not to): the inputs BVLC users extracted
      features from and published accuracies with. `anti_aliasing=True` is today's
      scikit-image default (a Gaussian of sigma (s − 1)/2 along each axis shrunk s-fold).
      Through scikit-image itself where it is installed; without it, the same arithmetic on
      scipy.ndimage.
    - any other K: scipy.ndimage.zoom (corner pixels map to corner pixels, nothing is
      clipped, never anti-aliased), as BVLC's.

    A constant image stays constant; an image already of that size comes back as a copy.
    """
    height, width = int(new_dims[0]), int(new_dims[1])
    if interp_order not in range(6):
        raise ValueError(f"interp_order must be a spline order 0 to 5, not {interp_order}")
    im = np.asarray(im)
    if im.ndim != 3:
        raise ValueError(f"resize_image needs an H×W×K image, not an array of shape {im.shape}")
    if not np.issubdtype(im.dtype, np.floating):
        im = im.astype(np.float64)
    if im.shape[:2] == (height, width):
        return im.astype(np.float32)
    if im.size and im.min() == im.max():
        return np.full((height, width, im.shape[2]), im.flat[0], dtype=np.float32)
    if im.shape[2] in (1, 3):
        lowest, highest = im.min(), im.max()
        unit = (im - lowest) / (highest - lowest)
        unit = _resize_unit(unit, height, width, interp_order, anti_aliasing)
        return (unit * (highest - lowest) + lowest).astype(np.float32)
    zoom = (height / im.shape[0], width / im.shape[1], 1.0)
    return _scipy_ndimage().zoom(im, zoom, order=interp_order).astype(np.float32)


def _resize_unit(
    unit: np.ndarray, height: int, width: int, order: int, anti_aliasing: bool
) -> np.ndarray:
    """skimage.transform.resize(unit, (height, width), order, mode="constant",
    anti_aliasing=anti_aliasing) of an image with values in [0, 1]."""
    try:
        from skimage.transform import resize
    except ImportError:
        return _resize_as_skimage(_scipy_ndimage(), unit, height, width, order, anti_aliasing)
    return resize(unit, (height, width), order=order, mode="constant",
                  anti_aliasing=anti_aliasing)  # fmt: skip


def _resize_as_skimage(
    ndimage: ModuleType, unit: np.ndarray, height: int, width: int, order: int,
    anti_aliasing: bool,
) -> np.ndarray:  # fmt: skip
    """What skimage's resize does with mode="constant", for machines without scikit-image:
    (anti-aliasing: a Gaussian when shrinking,) zoom on the pixel grid with zeros outside
    it, clip to the input's range [0, 1]."""
    factors = np.array(unit.shape, dtype=np.float64) / (height, width, unit.shape[2])
    if anti_aliasing and np.any(factors > 1):
        sigma = np.maximum(0.0, (factors - 1) / 2)
        unit = ndimage.gaussian_filter(unit, sigma, mode="grid-constant", cval=0.0)
    out = ndimage.zoom(
        unit, 1 / factors, order=order, mode="grid-constant", cval=0.0, grid_mode=True
    )
    return np.clip(out, 0.0, 1.0, out=out)


def _scipy_ndimage() -> ModuleType:
    try:
        from scipy import ndimage
    except ImportError:
        raise ImportError(
            "caffe.io.resize_image needs scipy: pip install scipy (or poseidon-caffe[images])"
        ) from None
    return ndimage


def oversample(images: Sequence[np.ndarray], crop_dims: Sequence[int]) -> np.ndarray:
    """Ten crops per H×W×K image: 4 corners and the centre, then the same 5 mirrored.

    Returns (10·N, crop_h, crop_w, K) float32, image by image.
    """
    height, width = images[0].shape[:2]
    crop_h, crop_w = int(crop_dims[0]), int(crop_dims[1])
    corners = [(0, 0), (0, width - crop_w), (height - crop_h, 0), (height - crop_h, width - crop_w)]
    centre = (int(height / 2.0 - crop_h / 2.0), int(width / 2.0 - crop_w / 2.0))
    windows = [*corners, centre]
    crops = np.empty((10 * len(images), crop_h, crop_w, images[0].shape[-1]), dtype=np.float32)
    index = 0
    for im in images:
        for top, left in windows:
            crops[index] = im[top : top + crop_h, left : left + crop_w, :]
            index += 1
        crops[index : index + 5] = crops[index - 5 : index, :, ::-1, :]
        index += 5
    return crops
