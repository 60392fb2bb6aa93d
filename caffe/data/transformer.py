"""DataTransformer: transform_param applied to a whole batch at once (docs/caffe_format.md §9.3).

For every item of an (N, C, H, W) batch, in Caffe's order:
    value = (pixel − mean) · scale
where `mean` is the mean_file blob at the item's **uncropped** position (it must match C,H,W)
or the per-channel mean_value (one value replicates to every channel), then
    crop    crop_size > 0: TRAIN takes offsets uniform in [0, H−crop] × [0, W−crop] per item,
            TEST takes the centred window ((H−crop)//2, (W−crop)//2);
    mirror  mirror: true flips each item left-right on a fair coin, in **every** phase.
Random draws come from the transformer's own torch.Generator; a layer seeds it from torch's
global generator at setup, so `caffe.set_random_seed` makes the stream reproducible. A batch's
draws are made at once (`draw`), then each item is transformed on its own (`transform_item`),
so that the data layers can fill a batch's rows on several threads with the same result.

Also here, because decoding is the transformer's job in Caffe: `datum_to_chw`, which turns a
Datum (raw uint8, float_data or an encoded image) into a C×H×W array.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from caffe.data.image_codec import decode_image
from caffe.errors import CaffeError, LayerError
from caffe.fillers import flush_fills
from caffe.formats.weights_io import read_blobproto
from caffe.proto import caffe_pb2


def seeded_generator() -> torch.Generator:
    """A CPU generator seeded from torch's global generator (so set_random_seed governs it)."""
    flush_fills()  # weights set up before this layer draw first (Note [deferred fills])
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
        self.mean: np.ndarray | None = None  # (C, H, W) float32, from mean_file
        self.mean_values: torch.Tensor | None = None  # (1 or C,) from mean_value
        self._mean_values_np: np.ndarray | None = None
        if param.mean_file:
            self.mean = self._load_mean(param.mean_file)
        elif len(param.mean_value):
            self.mean_values = torch.tensor(list(param.mean_value), dtype=torch.float32)

    def _error(self, message: str) -> LayerError:
        return LayerError(f"{self.where}: {message}")

    def _load_mean(self, path: str) -> np.ndarray:
        try:
            blob = read_blobproto(path)
        except CaffeError as e:
            raise self._error(f"cannot read mean_file: {e}") from None
        shape = tuple(blob.shape)
        if len(shape) < 3 or int(np.prod(shape[:-3])) != 1:
            raise self._error(
                f"mean_file {path} holds a blob of shape {shape}; expected 1×C×H×W or C×H×W"
            )
        return np.array(blob.data, dtype=np.float32).reshape(shape[-3:])

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
    def draw(self, n: int, channels: int, height: int, width: int) -> Windows:
        """The random part of a batch of `n` C×H×W items: each item's crop window and mirror
        coin, drawn in Caffe's order (coins, then row offsets, then column offsets) from the
        transformer's generator, on one thread (Note [decode threads] in caffe/data/threads.py)."""
        _, out_h, out_w = self.output_shape(channels, height, width)
        flips = [False] * n
        if self.mirror:
            flips = torch.randint(0, 2, (n,), generator=self.generator).bool().tolist()
        if self.crop_size and self.phase == caffe_pb2.TRAIN:
            tops = torch.randint(0, height - out_h + 1, (n,), generator=self.generator).tolist()
            lefts = torch.randint(0, width - out_w + 1, (n,), generator=self.generator).tolist()
        else:
            tops, lefts = [(height - out_h) // 2] * n, [(width - out_w) // 2] * n
        return Windows(out_h, out_w, tops, lefts, flips)

    def transform_item(self, item: np.ndarray, windows: Windows, i: int, out: np.ndarray) -> None:
        """Item `i` of a batch (C×H×W, uint8 or float32, any strides: a decoded image's BGR
        view is fine) into `out` (C×H'×W' float32): (value − mean) · scale over its window,
        mirrored on its coin. numpy and torch kernels, which release the GIL while they run."""
        top, left = windows.tops[i], windows.lefts[i]
        rows, cols = slice(top, top + windows.out_h), slice(left, left + windows.out_w)
        view = item[:, rows, cols]
        mean = self.mean[:, rows, cols] if self.mean is not None else self._mean_column
        if windows.flips[i]:
            self._mirrored_into(view, mean, out)
        elif mean is None:
            np.copyto(out, view, casting="unsafe")
        else:
            np.subtract(view, mean, out=out, casting="unsafe")
        if self.scale != 1:
            np.multiply(out, np.float32(self.scale), out=out)

    def _mirrored_into(self, view: np.ndarray, mean: np.ndarray | None, out: np.ndarray) -> None:
        """out = view − mean, both mirrored left-right. numpy reading a reversed axis loses its
        vector loops (2.5× slower); torch's flip keeps them."""
        if not view.flags.writeable or any(stride < 0 for stride in view.strides):
            view = view.copy()  # torch takes neither read-only nor reversed memory
        pixels = torch.from_numpy(view).flip(-1)
        target = torch.from_numpy(out)
        if mean is None:
            target.copy_(pixels)
        elif self.mean is not None:
            torch.sub(pixels, torch.from_numpy(np.ascontiguousarray(mean)).flip(-1), out=target)
        else:
            torch.sub(pixels, torch.from_numpy(mean), out=target)

    def transform(self, batch: torch.Tensor) -> torch.Tensor:
        """(N, C, H, W) uint8 or float -> a new float32 (N, C, H', W') tensor (the whole batch
        on this thread; the data layers assemble theirs in parallel, batch_assembly.py)."""
        if batch.dim() != 4:
            raise self._error(f"expected an N×C×H×W batch, got shape {tuple(batch.shape)}")
        n, c, h, w = batch.shape
        windows = self.draw(n, c, h, w)
        out = torch.empty((n, c, windows.out_h, windows.out_w), dtype=torch.float32)
        items, rows = batch.cpu().numpy(), out.numpy()
        for i in range(n):
            self.transform_item(items[i], windows, i, rows[i])
        return out

    @property
    def _mean_column(self) -> np.ndarray | None:
        """mean_value as a C×1×1 (or 1×1×1) float32 array, made once."""
        if self.mean_values is None:
            return None
        if self._mean_values_np is None:
            self._mean_values_np = self.mean_values.numpy().reshape(-1, 1, 1)
        return self._mean_values_np


@dataclass(frozen=True)
class Windows:
    """Each item's crop window (top, left; out_h × out_w) and mirror coin, for one batch."""

    out_h: int
    out_w: int
    tops: list[int]
    lefts: list[int]
    flips: list[bool]


def datum_to_chw(
    datum: caffe_pb2.Datum,
    force_color: bool = False,
    force_gray: bool = False,
    where: str = "datum",
    contiguous: bool = True,
) -> np.ndarray:
    """A Datum's values as C×H×W: uint8 for `data` (decoded if `encoded`), float32 otherwise;
    `contiguous=False` may return a read-only or strided view (decode_image)."""
    if datum.encoded:
        color = True if force_color else (False if force_gray else None)
        return decode_image(datum.data, color, where=where, contiguous=contiguous)
    shape = (datum.channels, datum.height, datum.width)
    size = shape[0] * shape[1] * shape[2]
    data = datum.data  # each read of a bytes field copies it: once
    if data:
        if len(data) != size:
            raise CaffeError(f"{where}: {len(data)} bytes of data for shape {shape}")
        return np.frombuffer(data, dtype=np.uint8).reshape(shape)
    if len(datum.float_data) != size:
        raise CaffeError(f"{where}: {len(datum.float_data)} float_data values for shape {shape}")
    return np.array(datum.float_data, dtype=np.float32).reshape(shape)
