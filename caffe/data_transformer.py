"""DataTransformer: transform_param applied to a whole batch at once (spec §9.3).

For every item of an (N, C, H, W) batch, in Caffe's order:
    value = (pixel − mean) · scale
where `mean` is the mean_file blob at the item's **uncropped** position (it must match C,H,W)
or the per-channel mean_value (one value replicates to every channel), then
    crop    crop_size > 0: TRAIN takes offsets uniform in [0, H−crop] × [0, W−crop] per item,
            TEST takes the centred window ((H−crop)//2, (W−crop)//2);
    mirror  mirror: true flips each item left-right on a fair coin, in **every** phase.
Random draws come from the transformer's own torch.Generator; a layer seeds it from torch's
global generator at setup, so `caffe.set_random_seed` makes the stream reproducible.

Also here, because decoding is the transformer's job in Caffe: `datum_to_chw`, which turns a
Datum (raw uint8, float_data or an encoded image) into a C×H×W array.
"""

from __future__ import annotations

import numpy as np
import torch

from caffe.errors import CaffeError, LayerError
from caffe.image_codec import decode_image
from caffe.proto import caffe_pb2
from caffe.weights_io import read_blobproto


def seeded_generator() -> torch.Generator:
    """A CPU generator seeded from torch's global generator (so set_random_seed governs it)."""
    seed = int(torch.randint(0, 2**62, (1,), dtype=torch.int64).item())
    return torch.Generator().manual_seed(seed)


class DataTransformer:
    """transform_param of one layer. `where` prefixes error messages (the layer's name)."""

    def __init__(
        self,
        param: caffe_pb2.TransformationParameter,
        phase: int,
        generator: torch.Generator | None = None,
        where: str = "transform_param",
    ) -> None:
        self.where = where
        self.phase = phase
        self.scale = float(param.scale)
        self.crop_size = int(param.crop_size)
        self.mirror = bool(param.mirror)
        self.force_color = bool(param.force_color)
        self.force_gray = bool(param.force_gray)
        self.generator = generator if generator is not None else seeded_generator()
        if self.force_color and self.force_gray:
            raise self._error("force_color and force_gray cannot both be set")
        if param.mean_file and len(param.mean_value):
            raise self._error("Cannot specify mean_file and mean_value at the same time")
        self.mean: torch.Tensor | None = None  # (C, H, W) from mean_file
        self.mean_values: torch.Tensor | None = None  # (1 or C,) from mean_value
        if param.mean_file:
            self.mean = self._load_mean(param.mean_file)
        elif len(param.mean_value):
            self.mean_values = torch.tensor(list(param.mean_value), dtype=torch.float32)

    def _error(self, message: str) -> LayerError:
        return LayerError(f"{self.where}: {message}")

    def _load_mean(self, path: str) -> torch.Tensor:
        try:
            blob = read_blobproto(path)
        except CaffeError as e:
            raise self._error(f"cannot read mean_file: {e}") from None
        shape = tuple(blob.shape)
        if len(shape) < 3 or int(np.prod(shape[:-3])) != 1:
            raise self._error(
                f"mean_file {path} holds a blob of shape {shape}; expected 1×C×H×W or C×H×W"
            )
        return torch.from_numpy(np.array(blob.data, dtype=np.float32).reshape(shape[-3:]))

    # ----- shapes ----------------------------------------------------------------------
    def output_shape(self, channels: int, height: int, width: int) -> tuple[int, int, int]:
        """The C×H×W of a transformed item; checks crop and mean against the input shape."""
        if self.crop_size and (height < self.crop_size or width < self.crop_size):
            raise self._error(
                f"crop_size {self.crop_size} is larger than the input {height}×{width}"
            )
        if self.mean is not None and tuple(self.mean.shape) != (channels, height, width):
            raise self._error(
                f"the mean_file blob is {tuple(self.mean.shape)} but the data is "
                f"{(channels, height, width)} (the mean must match the uncropped C,H,W)"
            )
        if self.mean_values is not None and len(self.mean_values) not in (1, channels):
            raise self._error(
                f"Specify either 1 mean_value or as many as channels: "
                f"{len(self.mean_values)} given for {channels} channels"
            )
        if self.crop_size:
            return channels, self.crop_size, self.crop_size
        return channels, height, width

    # ----- the transform ----------------------------------------------------------------
    def transform(self, batch: torch.Tensor) -> torch.Tensor:
        """(N, C, H, W) uint8 or float -> a new float32 (N, C, H', W') tensor."""
        if batch.dim() != 4:
            raise self._error(f"expected an N×C×H×W batch, got shape {tuple(batch.shape)}")
        _, c, h, w = batch.shape
        _, out_h, out_w = self.output_shape(c, h, w)
        x = batch.to(torch.float32)
        if self.mean is not None:
            x = x - self.mean  # before cropping: the mean is taken at the uncropped position
        elif self.mean_values is not None:
            x = x - self.mean_values.view(1, -1, 1, 1)
        x = self._crop_and_mirror(x, out_h, out_w)
        if self.scale != 1:
            x = x * self.scale
        return x.contiguous()

    def _crop_and_mirror(self, x: torch.Tensor, out_h: int, out_w: int) -> torch.Tensor:
        n, c, h, w = x.shape
        flips = None
        if self.mirror:
            flips = torch.randint(0, 2, (n,), generator=self.generator).bool()
        if self.crop_size and self.phase == caffe_pb2.TRAIN:
            h_off = torch.randint(0, h - out_h + 1, (n,), generator=self.generator)
            w_off = torch.randint(0, w - out_w + 1, (n,), generator=self.generator)
        else:
            h_off = torch.full((n,), (h - out_h) // 2, dtype=torch.int64)
            w_off = torch.full((n,), (w - out_w) // 2, dtype=torch.int64)
        if flips is None and bool((h_off == h_off[:1]).all()) and bool((w_off == w_off[:1]).all()):
            # One window for the whole batch (TEST, or no crop): a plain slice.
            top, left = (int(h_off[0]), int(w_off[0])) if n else (0, 0)
            return x[:, :, top : top + out_h, left : left + out_w]
        # Per-item windows, optionally reversed, gathered in one indexing operation.
        rows = h_off[:, None] + torch.arange(out_h)  # (n, out_h)
        cols = torch.arange(out_w).expand(n, out_w)
        if flips is not None:
            cols = torch.where(flips[:, None], out_w - 1 - cols, cols)
        cols = w_off[:, None] + cols  # (n, out_w)
        items = torch.arange(n)[:, None, None, None]
        channels = torch.arange(c)[None, :, None, None]
        return x[items, channels, rows[:, None, :, None], cols[:, None, None, :]]


def datum_to_chw(
    datum: caffe_pb2.Datum,
    force_color: bool = False,
    force_gray: bool = False,
    where: str = "datum",
) -> np.ndarray:
    """A Datum's values as C×H×W: uint8 for `data` (decoded if `encoded`), float32 otherwise."""
    if datum.encoded:
        color = True if force_color else (False if force_gray else None)
        return decode_image(datum.data, color, where=where)
    shape = (datum.channels, datum.height, datum.width)
    size = shape[0] * shape[1] * shape[2]
    if datum.data:
        if len(datum.data) != size:
            raise CaffeError(f"{where}: {len(datum.data)} bytes of data for shape {shape}")
        return np.frombuffer(datum.data, dtype=np.uint8).reshape(shape)
    if len(datum.float_data) != size:
        raise CaffeError(f"{where}: {len(datum.float_data)} float_data values for shape {shape}")
    return np.array(datum.float_data, dtype=np.float32).reshape(shape)
