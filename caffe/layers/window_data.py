"""WindowData: R-CNN's fine-tuning input, batches of image windows warped to a square.

The window file (window_data_param.source) repeats, for every image, whitespace-separated:

    # image_index
    image_path            (root_folder is prefixed)
    channels height width
    num_windows
    class_index overlap x1 y1 x2 y2      (num_windows lines; inclusive pixel corners)

A window with overlap >= fg_threshold is foreground (its class must be > 0); one with
overlap < bg_threshold is background (label and overlap forced to 0); others are dropped.
Each batch draws batch_size − int(batch_size · fg_fraction) background windows, then the
foreground ones, uniformly with replacement. Each window is cut out of its image (read in
colour, BGR, as OpenCV), warped bilinearly to crop_size × crop_size, flipped left-right on a
coin when mirror is set (in every phase, as Caffe), and written as (pixel − mean) · scale.

context_pad > 0 or crop_mode "square" (any other crop_mode warps): the window is first
grown about its centre by crop_size / (crop_size − 2·context_pad), and to a square in
"square" mode; the part of the grown window outside the image is left as zeros in the crop
(the warp keeps its scale), so the object keeps context_pad pixels of context on every side.
Every rounding and float32 step is Caffe's (`window_geometry`). Only the pixels copied from
the image have the mean subtracted; padding stays 0.

Parameters: crop_size, mirror and mean_file/mean_value come from transform_param; scale,
the thresholds, fg_fraction, context_pad, crop_mode, cache_images (keep every image's
encoded bytes in memory) and root_folder from window_data_param. The mean file's blob is
read at (c, h + off, w + off) for output cell (c, h, w), off = (mean width − crop_size) // 2.
Tops: data (batch_size, 3, crop_size, crop_size) and label (batch_size).

The warp is OpenCV's INTER_LINEAR geometry (half-pixel centres, no antialiasing), rounded to
8 bits as OpenCV does; OpenCV's fixed-point arithmetic may differ by one grey level.
Random draws come from the layer's own torch.Generator, seeded once from torch's global one,
so every rank (seeded random_seed + rank) draws its own windows (nothing is sharded) and
fast_forward (a resumed run) replays the draws without reading images.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from caffe.common import root_solver
from caffe.data.image_codec import decode_image, join_root, pillow, read_image
from caffe.data.prefetch import BatchLoader, PrefetchingDataLayer, layer_label
from caffe.errors import CaffeError
from caffe.fillers import flush_fills
from caffe.formats.weights_io import read_blobproto
from caffe.layer import register_layer

_log = logging.getLogger("caffe")
_f32 = np.float32
COLOR_CHANNELS = 3  # images are read in colour, whatever the window file says


@dataclass(frozen=True)
class Window:
    image: int  # index of the image in the window file
    label: int
    overlap: float
    x1: int
    y1: int
    x2: int
    y2: int


@dataclass
class WindowFile:
    images: list[tuple[str, tuple[int, int, int]]]  # (path with root_folder, (C, H, W))
    foreground: list[Window]
    background: list[Window]


def parse_window_file(
    text: str, root_folder: str, fg_threshold: float, bg_threshold: float, where: str
) -> WindowFile:
    """The images and the foreground / background windows of a window file's text."""
    tokens = text.split()
    position = 0

    def take(kind, what: str):  # type: ignore[no-untyped-def]
        nonlocal position
        if position >= len(tokens):
            raise CaffeError(f"{where}: the file ends where {what} was expected")
        token = tokens[position]
        position += 1
        try:
            return kind(token)
        except ValueError:
            raise CaffeError(f"{where}: expected {what}, got {token!r}") from None

    if not tokens:
        raise CaffeError(f"{where}: Window file is empty")
    result = WindowFile([], [], [])
    fg_threshold, bg_threshold = _f32(fg_threshold), _f32(bg_threshold)
    while position < len(tokens):
        entry = f"image entry {len(result.images) + 1}"
        if take(str, f"'#' starting {entry}") != "#":
            raise CaffeError(
                f"{where}: expected '#' starting {entry}, got {tokens[position - 1]!r}"
            )
        index = take(int, f"the image index of {entry}")
        path = join_root(root_folder, take(str, f"the image path of {entry}"))
        size = tuple(take(int, f"{name} of {entry}") for name in ("channels", "height", "width"))
        result.images.append((path, size))
        for number in range(take(int, f"the number of windows of {entry}")):
            what = f"window {number + 1} of {entry} ({path})"
            label = take(int, f"the class of {what}")
            overlap = _f32(take(float, f"the overlap of {what}"))
            corners = [take(int, f"{name} of {what}") for name in ("x1", "y1", "x2", "y2")]
            if overlap >= fg_threshold:
                if label <= 0:
                    raise CaffeError(f"{where}: {what} has overlap {overlap} >= fg_threshold "
                                     f"{fg_threshold} but class {label}; foreground classes "
                                     f"must be > 0")  # fmt: skip
                result.foreground.append(Window(index, label, float(overlap), *corners))
            elif overlap < bg_threshold:
                result.background.append(Window(index, 0, 0.0, *corners))
    for window in result.foreground + result.background:
        if not 0 <= window.image < len(result.images):
            raise CaffeError(
                f"{where}: a window refers to image index {window.image}, but the file lists "
                f"{len(result.images)} images (indices from 0)"
            )
    return result


def _c_round(value: np.floating) -> int:
    """C's round(): halves away from zero (Python's round() goes to even)."""
    return int(math.copysign(math.floor(abs(float(value)) + 0.5), float(value)))


@dataclass(frozen=True)
class Crop:
    x1: int  # the image region to warp, inclusive corners
    y1: int
    x2: int
    y2: int
    height: int  # the size it is warped to
    width: int
    pad_h: int  # where the warped region starts in the crop_size × crop_size output
    pad_w: int


def window_geometry(
    window: Window,
    image_hw: tuple[int, int],
    crop_size: int,
    context_pad: int,
    square: bool,
    mirror: bool,
) -> Crop:
    """Caffe's geometry for one window, in its float32 arithmetic and C rounding."""
    x1, y1, x2, y2 = window.x1, window.y1, window.x2, window.y2
    if context_pad == 0 and not square:
        return Crop(x1, y1, x2, y2, crop_size, crop_size, 0, 0)
    rows, cols = image_hw
    context_scale = _f32(crop_size) / _f32(crop_size - 2 * context_pad)
    half_height, half_width = _f32((y2 - y1 + 1) / 2.0), _f32((x2 - x1 + 1) / 2.0)
    center_x, center_y = _f32(x1) + half_width, _f32(y1) + half_height
    if square:
        half_height = half_width = max(half_height, half_width)
    x1 = _c_round(center_x - half_width * context_scale)
    x2 = _c_round(center_x + half_width * context_scale)
    y1 = _c_round(center_y - half_height * context_scale)
    y2 = _c_round(center_y + half_height * context_scale)
    # The grown window may leave the image: clip it and keep the extent beyond the image.
    unclipped_height, unclipped_width = y2 - y1 + 1, x2 - x1 + 1
    pad_x1, pad_y1 = max(0, -x1), max(0, -y1)
    pad_x2, pad_y2 = max(0, x2 - cols + 1), max(0, y2 - rows + 1)
    x1, x2, y1, y2 = x1 + pad_x1, x2 - pad_x2, y1 + pad_y1, y2 - pad_y2
    # The scales that would warp the unclipped window; the clipped part keeps them.
    scale_x = _f32(crop_size) / _f32(unclipped_width)
    scale_y = _f32(crop_size) / _f32(unclipped_height)
    width = _c_round(_f32(x2 - x1 + 1) * scale_x)
    height = _c_round(_f32(y2 - y1 + 1) * scale_y)
    pad_h = _c_round(_f32(pad_y1) * scale_y)
    pad_w = _c_round(_f32(pad_x2 if mirror else pad_x1) * scale_x)  # mirrored: the right pad
    # Rounding may overshoot the output by a pixel.
    height = min(height, crop_size - pad_h)
    width = min(width, crop_size - pad_w)
    return Crop(x1, y1, x2, y2, height, width, pad_h, pad_w)


def warp(image: np.ndarray, crop: Crop) -> np.ndarray:
    """The crop's region of a C×H×W uint8 image, resized bilinearly (OpenCV's INTER_LINEAR
    geometry) to crop.height × crop.width and rounded to 8 bits; float32."""
    region = image[:, crop.y1 : crop.y2 + 1, crop.x1 : crop.x2 + 1]
    if region.shape[1:] == (crop.height, crop.width):
        return region.astype(np.float32)
    pixels = torch.from_numpy(np.ascontiguousarray(region)).to(torch.float32)[None]
    resized = F.interpolate(pixels, (crop.height, crop.width), mode="bilinear", align_corners=False)
    return resized[0].round_().clamp_(0, 255).numpy()


class WindowLoader(BatchLoader):
    """Draws background then foreground windows and warps them into batches."""

    def __init__(self, layer: WindowDataLayer, windows: WindowFile, seed: int, where: str) -> None:
        super().__init__(where)
        p, t = layer.layer_param.window_data_param, layer.layer_param.transform_param
        self.windows = windows
        self.batch_size = int(p.batch_size)
        num_fg = int(_f32(p.batch_size) * _f32(p.fg_fraction))
        self.counts = ((self.batch_size - num_fg, windows.background), (num_fg, windows.foreground))
        self.crop_size, self.mirror = int(t.crop_size), bool(t.mirror)
        self.context_pad, self.square = int(p.context_pad), p.crop_mode == "square"
        self.scale = _f32(p.scale)
        self.mean: np.ndarray | None = None  # (C, crop, crop): the mean at each output cell
        self.generator = torch.Generator().manual_seed(seed)
        self.cache: list[bytes] | None = None

    def _randint(self, high: int) -> int:
        return int(torch.randint(0, high, (1,), generator=self.generator))

    def _draw(self, windows: list[Window]) -> tuple[Window, bool]:
        window = windows[self._randint(len(windows))]
        return window, self.mirror and self._randint(2) == 1

    def image(self, index: int) -> np.ndarray:
        path = self.windows.images[index][0]
        try:
            if self.cache is not None:
                return decode_image(self.cache[index], color=True, where=path)
            return read_image(path, color=True)
        except CaffeError as e:
            raise self.error(str(e)) from None

    def load_batch(self) -> list[torch.Tensor]:
        size = self.crop_size
        data = np.zeros((self.batch_size, COLOR_CHANNELS, size, size), np.float32)
        labels = np.zeros(self.batch_size, np.float32)
        item = 0
        for count, windows in self.counts:
            for _ in range(count):
                window, mirror = self._draw(windows)
                image = self.image(window.image)
                crop = window_geometry(window, image.shape[1:], size, self.context_pad,
                                       self.square, mirror)  # fmt: skip
                self._check(window, crop, image.shape[1:])
                pixels = warp(image, crop)
                if mirror:
                    pixels = pixels[:, :, ::-1]
                cells = (slice(None), slice(crop.pad_h, crop.pad_h + crop.height),
                         slice(crop.pad_w, crop.pad_w + crop.width))  # fmt: skip
                if self.mean is not None:
                    pixels = pixels - self.mean[cells]
                data[item][cells] = pixels * self.scale
                labels[item] = window.label
                item += 1
        return [torch.from_numpy(data), torch.from_numpy(labels)]

    def _check(self, window: Window, crop: Crop, image_hw: tuple[int, int]) -> None:
        rows, cols = image_hw
        inside = 0 <= crop.x1 <= crop.x2 < cols and 0 <= crop.y1 <= crop.y2 < rows
        if not inside or crop.height <= 0 or crop.width <= 0:
            corners = (window.x1, window.y1, window.x2, window.y2)
            raise self.error(
                f"window (x1, y1, x2, y2) = {corners} of {self.windows.images[window.image][0]} "
                f"({rows}×{cols}) gives the region ({crop.x1}, {crop.y1}, {crop.x2}, {crop.y2}) "
                f"warped to {crop.height}×{crop.width}: not inside the image or empty"
            )

    def skip_batches(self, count: int) -> None:
        for _ in range(count):  # the same draws, without reading images
            for number, windows in self.counts:
                for _ in range(number):
                    self._draw(windows)


@register_layer("WindowData")
class WindowDataLayer(PrefetchingDataLayer):
    exact_num_top = 2
    # Drawn from torch's global generator at the first setup and kept, so that a loader
    # restarted by fast_forward (a resumed run) draws the windows the first one drew.
    _seed: int | None = None

    def make_loader(self, top):
        p, t = self.layer_param.window_data_param, self.layer_param.transform_param
        where = layer_label(self)
        pillow(where)
        if p.batch_size <= 0:
            raise self.error("window_data_param.batch_size must be positive")
        if not p.source:
            raise self.error("window_data_param.source is not set")
        for name in ("crop_size", "mirror", "mean_file"):
            if p.HasField(name):
                _log.warning("%s: window_data_param.%s is ignored, as in Caffe; set "
                             "transform_param.%s", where, name, name)  # fmt: skip
        if t.scale != 1:
            _log.warning("%s: transform_param.scale is ignored; WindowData scales by "
                         "window_data_param.scale", where)  # fmt: skip
        if t.crop_size <= 0:
            raise self.error("transform_param.crop_size must be positive: every window is "
                             "warped to crop_size × crop_size")  # fmt: skip
        if 2 * p.context_pad >= t.crop_size:
            raise self.error(f"context_pad {p.context_pad} leaves nothing of crop_size "
                             f"{t.crop_size} for the window")  # fmt: skip
        if p.crop_mode not in ("warp", "square"):
            _log.warning("%s: crop_mode '%s' is neither 'warp' nor 'square'; warping",
                         where, p.crop_mode)  # fmt: skip
        try:
            with open(p.source) as f:
                text = f.read()
            windows = parse_window_file(
                text, p.root_folder, p.fg_threshold, p.bg_threshold, f"window file {p.source}"
            )
        except OSError as e:
            raise self.error(f"Failed to open window file {p.source}: {e.strerror}") from None
        except CaffeError as e:
            raise self.error(str(e)) from None
        channels = windows.images[-1][1][0]
        if channels != COLOR_CHANNELS:
            raise self.error(f"the window file gives {channels} channels; WindowData reads "
                             f"images in colour ({COLOR_CHANNELS} channels)")  # fmt: skip
        if not windows.foreground or not windows.background:
            raise self.error(f"window file {p.source} has {len(windows.foreground)} foreground "
                             f"and {len(windows.background)} background windows; WindowData "
                             f"needs both")  # fmt: skip
        if self._seed is None:
            flush_fills()  # Note [deferred fills] (caffe/fillers.py)
            self._seed = int(torch.randint(0, 2**62, (1,), dtype=torch.int64))
        loader = WindowLoader(self, windows, self._seed, where)
        loader.mean = self._mean(t)
        if p.cache_images:
            loader.cache = [self._read_bytes(path) for path, _ in windows.images]
        if root_solver():
            self._log_summary(windows)
        top[0].reshape(p.batch_size, channels, t.crop_size, t.crop_size)
        top[1].reshape(p.batch_size)
        return loader

    def _read_bytes(self, path: str) -> bytes:
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            raise self.error(f"Could not open or find file {path}: {e.strerror}") from None

    def _mean(self, t) -> np.ndarray | None:  # type: ignore[no-untyped-def]
        """The mean at each cell of the crop_size × crop_size output, or None."""
        size = t.crop_size
        if t.mean_file and len(t.mean_value):
            raise self.error("Cannot specify mean_file and mean_value at the same time")
        if len(t.mean_value):
            values = np.array(list(t.mean_value), np.float32)
            if len(values) not in (1, COLOR_CHANNELS):
                raise self.error(f"Specify either 1 mean_value or as many as channels: "
                                 f"{COLOR_CHANNELS} ({len(values)} given)")  # fmt: skip
            return np.broadcast_to(values[:, None, None], (COLOR_CHANNELS, size, size))
        if not t.mean_file:
            return None
        try:
            blob = read_blobproto(t.mean_file)
        except CaffeError as e:
            raise self.error(f"cannot read mean_file: {e}") from None
        shape = tuple(blob.shape)
        if len(shape) < 3 or math.prod(shape[:-3]) != 1 or shape[-3] != COLOR_CHANNELS:
            raise self.error(f"mean_file {t.mean_file} holds a blob of shape {shape}; expected "
                             f"1×{COLOR_CHANNELS}×H×W")  # fmt: skip
        mean = np.asarray(blob.data, np.float32).reshape(shape[-3:])
        off = (shape[-1] - size) // 2  # Caffe takes the offset from the width for both axes
        if off < 0 or off + size > shape[-2]:
            raise self.error(f"the mean_file blob {shape[-3:]} is too small for crop_size "
                             f"{size} at offset {off}")  # fmt: skip
        return mean[:, off : off + size, off : off + size]

    def _log_summary(self, windows: WindowFile) -> None:
        p = self.layer_param.window_data_param
        _log.info("Window data layer: foreground (object) overlap threshold: %g, background "
                  "(non-object) overlap threshold: %g, foreground sampling fraction: %g, "
                  "cache_images: %s, root_folder: %s", p.fg_threshold, p.bg_threshold,
                  p.fg_fraction, p.cache_images, p.root_folder)  # fmt: skip
        _log.info("Number of images: %d", len(windows.images))
        classes = Counter(w.label for w in windows.foreground + windows.background)
        for label in sorted(set(classes) | {0}):
            _log.info("class %d has %d samples", label, classes[label])
        _log.info("Amount of context padding: %d", p.context_pad)
        _log.info("Crop mode: %s", p.crop_mode)
