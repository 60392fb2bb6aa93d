"""pycaffe's caffe.Detector: a Net that scores windows of images (R-CNN style).

Windows are (ymin, xmin, ymax, xmax) in pixels. Without context padding a window is cut as
im[ymin:ymax, xmin:xmax] and warped to the net input by the Transformer. With `context_pad`
p the window is first enlarged so that, once warped to the crop size S, p pixels of image
context surround it (scale S / (S - 2p)); whatever of the enlarged box lies outside the image
is filled with the mean, so that it preprocesses to zero.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import numpy as np

from caffe import io
from caffe.errors import CaffeError
from caffe.input_transformer import input_transformer
from caffe.net import Net
from caffe.proto import caffe_pb2

_SELECTIVE_SEARCH = "selective_search_ijcv_with_python"


class Detector(Net):
    """A TEST-phase net that classifies windows; preprocessing as caffe.Classifier's."""

    def __init__(
        self,
        model_file: str,
        pretrained_file: str,
        mean: np.ndarray | None = None,
        input_scale: float | None = None,
        raw_scale: float | None = None,
        channel_swap: Sequence[int] | None = None,
        context_pad: int | None = None,
    ) -> None:
        Net.__init__(self, model_file, caffe_pb2.TEST, weights=pretrained_file)
        self.transformer = input_transformer(self, mean, input_scale, raw_scale, channel_swap)
        self.configure_crop(context_pad)

    def detect_windows(
        self, images_windows: Iterable[tuple[str, np.ndarray]]
    ) -> list[dict[str, object]]:
        """Score every window of every image: [{'window', 'prediction', 'filename'}], in
        input order. `images_windows` pairs an image file with its (n, 4) windows."""
        pairs = [(filename, _windows_array(filename, w)) for filename, w in images_windows]
        if not pairs:
            raise CaffeError("Detector.detect_windows: no images (images_windows is empty)")
        in_ = self.inputs[0]
        channels = self.blobs[in_].data.shape[1]
        if channels not in (1, 3):
            raise CaffeError(f"input '{in_}' has {channels} channels; image files give 1 or 3")
        window_inputs = []
        for filename, windows in pairs:
            image = _load(filename, color=channels == 3)
            for window in windows:
                window_inputs.append(self.crop(image, window))
        if not window_inputs:
            raise CaffeError("Detector.detect_windows: the images have no windows to score")
        caffe_in = np.zeros((len(window_inputs), *self.blobs[in_].data.shape[1:]), np.float32)
        for ix, window_in in enumerate(window_inputs):
            caffe_in[ix] = self.transformer.preprocess(in_, window_in)
        predictions = self.forward_all(**{in_: caffe_in})[self.outputs[0]]
        # A fully convolutional head gives (n, classes, 1, 1): one vector per window.
        if predictions.ndim > 2 and all(d == 1 for d in predictions.shape[2:]):
            predictions = predictions.reshape(predictions.shape[:2])
        labels = [(filename, window) for filename, windows in pairs for window in windows]
        return [
            {"window": window, "prediction": prediction, "filename": filename}
            for (filename, window), prediction in zip(labels, predictions)
        ]

    def detect_selective_search(self, image_fnames: Iterable[str]) -> list[dict[str, object]]:
        """detect_windows over the windows that selective search proposes for each image."""
        try:
            import selective_search_ijcv_with_python as selective_search
        except ImportError:
            raise ImportError(
                f"Detector.detect_selective_search needs the '{_SELECTIVE_SEARCH}' module "
                "(and MATLAB), which is not installed; detect_windows works without it, "
                "given windows you computed yourself",
                name=_SELECTIVE_SEARCH,
            ) from None
        fnames = [os.path.abspath(f) for f in image_fnames]
        windows_list = selective_search.get_windows(fnames, cmd="selective_search_rcnn")
        return self.detect_windows(list(zip(fnames, windows_list)))

    def crop(self, im: np.ndarray, window: np.ndarray) -> np.ndarray:
        """The H×W×K pixels of `window` in `im`; with context_pad, the crop_dims-sized
        context crop (warped window plus context, mean-padded outside the image)."""
        im = np.asarray(im)
        if im.ndim != 3:
            raise CaffeError(f"Detector.crop: the image has shape {im.shape}, not H×W×K")
        ymin, xmin, ymax, xmax = _checked_window(window, im.shape[:2])
        if not self.context_pad:
            return im[ymin:ymax, xmin:xmax]
        return self._context_crop(im, (ymin, xmin, ymax, xmax))

    def configure_crop(self, context_pad: int | None) -> None:
        """Set the context padding and, with one, the mean in raw image space that pads
        context crops (`crop_mean`; zeros without a mean, None without context_pad)."""
        in_ = self.inputs[0]
        inverse = np.argsort(self.transformer.transpose[in_])
        # The input blob's K×H×W as the H×W×K of an image.
        self.crop_dims = np.array(self.blobs[in_].data.shape[1:])[inverse]
        if context_pad is not None:
            context_pad = int(context_pad)
            if context_pad < 0 or 2 * context_pad >= min(self.crop_dims[:2]):
                raise CaffeError(
                    f"context_pad {context_pad} must be >= 0 and leave room in the "
                    f"{self.crop_dims[0]}×{self.crop_dims[1]} net input (2·pad < size)"
                )
        self.context_pad = context_pad
        self.crop_mean: np.ndarray | None = None
        if not context_pad:
            return
        mean = self.transformer.mean.get(in_)
        if mean is None:
            self.crop_mean = np.zeros(self.crop_dims, dtype=np.float32)
            return
        # Undo the preprocessing steps that come before the mean: transpose, channel swap and
        # raw scale, so that a padded pixel preprocesses to exactly zero.
        crop_mean = np.array(mean, dtype=np.float32).transpose(inverse)
        channel_swap = self.transformer.channel_swap.get(in_)
        if channel_swap is not None:
            if sorted(channel_swap) != list(range(len(channel_swap))):
                raise CaffeError(
                    f"channel_swap {list(channel_swap)} is not a permutation of the channels, "
                    "so the mean cannot be mapped back to pad context crops"
                )
            crop_mean = crop_mean[:, :, np.argsort(channel_swap)]
        raw_scale = self.transformer.raw_scale.get(in_)
        if raw_scale is not None:
            crop_mean = crop_mean / raw_scale
        self.crop_mean = crop_mean

    def _context_crop(self, im: np.ndarray, window: tuple[int, int, int, int]) -> np.ndarray:
        """pycaffe's context crop geometry, per axis (the same as pycaffe's for square inputs).

        The window's size counts ymax and xmax inclusively (R-CNN's convention), while the
        pixels are sliced end-exclusive, as pycaffe does.
        """
        crop_size = self.crop_dims[:2].astype(np.float64)
        start = np.array(window[:2], dtype=np.float64)
        half = (np.array(window[2:], dtype=np.float64) - start + 1) / 2.0
        centre = start + half
        scale = crop_size / (crop_size - 2 * self.context_pad)
        box_start = np.round(centre - scale * half)
        box_end = np.round(centre + scale * half)
        warp = crop_size / (box_end - box_start + 1)  # crop pixels per image pixel
        # Rows and columns of the enlarged box above/left of the image become padding.
        pad = np.array([round(v) for v in np.maximum(0, -box_start) * warp], dtype=int)
        image_size = np.array(im.shape[:2], dtype=np.float64)
        box_start = np.clip(box_start, 0, image_size)
        box_end = np.clip(box_end, 0, image_size)
        size = np.array([round(v) for v in (box_end - box_start + 1) * warp], dtype=int)
        size = np.minimum(size, self.crop_dims[:2] - pad)
        top, left = box_start.astype(int)
        bottom, right = box_end.astype(int)
        context = io.resize_image(im[top:bottom, left:right], size)
        crop = np.ones(self.crop_dims, dtype=np.float32) * self.crop_mean
        crop[pad[0] : pad[0] + size[0], pad[1] : pad[1] + size[1]] = context
        return crop


def _windows_array(filename: str, windows: np.ndarray) -> np.ndarray:
    array = np.asarray(windows)
    if array.size == 0:
        return array.reshape(0, 4)
    if array.ndim != 2 or array.shape[1] != 4:
        raise CaffeError(
            f"windows of {filename} have shape {array.shape}; "
            "expected (n, 4) rows of (ymin, xmin, ymax, xmax)"
        )
    return array


def _checked_window(window: np.ndarray, image_size: tuple[int, int]) -> tuple[int, ...]:
    """The window as ints, or a CaffeError unless it is a non-empty box inside the image."""
    values = np.asarray(window)
    if values.shape != (4,) or not np.all(np.isfinite(values)):
        raise CaffeError(f"window {window!r} is not 4 numbers (ymin, xmin, ymax, xmax)")
    ints = values.astype(np.int64)
    if np.any(ints != values):
        raise CaffeError(f"window {values.tolist()} has non-integer pixel coordinates")
    ymin, xmin, ymax, xmax = (int(v) for v in ints)
    height, width = image_size
    if not (0 <= ymin < ymax <= height and 0 <= xmin < xmax <= width):
        raise CaffeError(
            f"window (ymin, xmin, ymax, xmax) = {(ymin, xmin, ymax, xmax)} is empty or "
            f"outside the {height}×{width} image"
        )
    return ymin, xmin, ymax, xmax


def _load(filename: str, color: bool) -> np.ndarray:
    try:
        return io.load_image(filename, color).astype(np.float32)
    except OSError as e:
        raise CaffeError(f"Could not open or find image {filename}: {e}") from None
