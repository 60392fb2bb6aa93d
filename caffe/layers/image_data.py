"""ImageData: batches of image files named in a list file (image_data_param,
docs/caffe_format.md §9.4).

Each line of `source` is "path label", split at the LAST space (paths may contain spaces).
Images are read with Pillow (an optional dependency; without it the layer says so), in
OpenCV's conventions as Caffe: BGR for `is_color: true`, one grey channel otherwise, resized
bilinearly to new_height × new_width when both are set, then transformed by transform_param.
`root_folder` is prefixed to every path. `shuffle` shuffles the list at setup and at every
wrap-around; `rand_skip` skips a random number of lines once. Batches are loaded on the prefetch
thread, whose decode threads read and transform a batch's images in parallel (caffe/
batch_assembly.py); each batch takes the shape of its first image. Tops: data (N, C, H, W),
label (N).

Sharding (caffe/data/shard.py) applies as for Data and HDF5Data: in TRAIN with P solvers, this
rank keeps the line at running offset k iff k % P == its rank. Caffe's ImageData does not shard
(every GPU reads every line); we do, so that P workers see disjoint data. With `shuffle`, each
rank shuffles with its own generator, so the ranks sample rather than partition an epoch.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from caffe.common import root_solver
from caffe.data.batch_assembly import assemble_batch
from caffe.data.image_codec import join_root, pillow, read_image
from caffe.data.prefetch import BatchLoader, PrefetchingDataLayer, layer_label
from caffe.data.shard import Shard, WrapWarning, shard_for_phase
from caffe.data.transformer import DataTransformer, seeded_generator
from caffe.errors import CaffeError
from caffe.layer import register_layer
from caffe.layers.hdf5_data import read_list_file

_log = logging.getLogger("caffe")
_DEPRECATED_FIELDS = ("scale", "mean_file", "crop_size", "mirror")


class ImageLoader(BatchLoader):
    """Walks the list (sharded, wrapping, reshuffling) and loads image batches."""

    def __init__(
        self,
        lines: list[tuple[str, int]],
        param,  # ImageDataParameter
        transformer: DataTransformer,
        shard: Shard,
        with_labels: bool,
        where: str,
    ) -> None:
        super().__init__(where)
        self.lines = lines
        self.root_folder = param.root_folder
        self.color = bool(param.is_color)
        self.new_height, self.new_width = int(param.new_height), int(param.new_width)
        self.batch_size = int(param.batch_size)
        self.shuffle = bool(param.shuffle)
        self.transformer = transformer
        self.generator = transformer.generator
        self.shard = shard
        self.with_labels = with_labels
        self.order = self._permutation()
        self.position = 0  # index into self.order
        self.offset = 0  # running count of lines passed, across wrap-arounds

    def _permutation(self) -> list[int]:
        if self.shuffle:
            return torch.randperm(len(self.lines), generator=self.generator).tolist()
        return list(range(len(self.lines)))

    def _step(self) -> None:
        self.position += 1
        self.offset += 1
        if self.position == len(self.order):
            if root_solver():
                _log.info("Restarting data prefetching from start.")
            self.position = 0
            if self.shuffle:
                self.order = self._permutation()

    def skip(self, count: int) -> None:
        if count >= len(self.lines):
            raise self.error(
                f"Not enough points to skip: rand_skip drew {count} for {len(self.lines)} lines"
            )
        self.position = count

    def read(self, index: int, contiguous: bool = True) -> np.ndarray:
        """Line `index`'s image as C×H×W; runs on the decode threads (thread-safe)."""
        path, _ = self.lines[index]
        try:
            return read_image(join_root(self.root_folder, path), self.color, self.new_height,
                              self.new_width, contiguous=contiguous)  # fmt: skip
        except CaffeError as e:
            raise self.error(f"Could not load line {index + 1} of the list: {e}") from None

    def current_image(self) -> np.ndarray:
        return self.read(self.order[self.position])

    def load_batch(self) -> list[torch.Tensor]:
        indices = []  # the batch's lines, in order, walked on this thread
        for _ in range(self.batch_size):
            while not self.shard.keeps(self.offset):
                self._step()
            indices.append(self.order[self.position])
            self._step()

        def mismatch(i: int, shape: tuple[int, ...], first: tuple[int, ...]) -> CaffeError:
            return self.error(
                f"image {self.lines[indices[i]][0]} is {shape} but the batch started with "
                f"{first}; set new_height/new_width or use batch_size 1"
            )

        data = assemble_batch(lambda i: self.read(indices[i], contiguous=False), len(indices),
                              self.transformer, mismatch, self.new_tensor)  # fmt: skip
        batch = [data]
        if self.with_labels:
            labels = [self.lines[i][1] for i in indices]
            batch.append(torch.tensor(labels, dtype=torch.float32, pin_memory=self.pin_memory))
        return batch


def parse_image_list(layer, source: str) -> list[tuple[str, int]]:  # type: ignore[no-untyped-def]
    """(path, label) per line of `source`; the label follows the last space."""
    lines = []
    for number, line in enumerate(read_list_file(layer, source), start=1):
        path, _, label = line.rpartition(" ")
        try:
            lines.append((path, int(label)))
        except ValueError:
            raise layer.error(f"{source}:{number}: expected 'path label', got {line!r}") from None
        if not path:
            raise layer.error(f"{source}:{number}: expected 'path label', got {line!r}")
    if not lines:
        raise layer.error(f"File is empty: {source}")
    return lines


@register_layer("ImageData")
class ImageDataLayer(PrefetchingDataLayer):
    exact_num_top = 2
    wrap_warning: WrapWarning | None = None

    def make_loader(self, top):
        param = self.layer_param.image_data_param
        pillow(layer_label(self))
        if param.batch_size <= 0:
            raise self.error("image_data_param.batch_size must be positive")
        if (param.new_height > 0) != (param.new_width > 0):
            raise self.error("new_height and new_width must be set together")
        if not param.source:
            raise self.error("image_data_param.source is not set")
        for name in _DEPRECATED_FIELDS:
            if param.HasField(name):
                _log.warning(
                    "%s: image_data_param.%s is deprecated and ignored; use transform_param",
                    layer_label(self),
                    name,
                )
        lines = parse_image_list(self, param.source)
        if root_solver():
            _log.info("A total of %d images.", len(lines))
        transformer = DataTransformer(
            self.layer_param.transform_param,
            self.phase,
            seeded_generator(),
            where=layer_label(self),
        )
        self.shard = shard_for_phase(self.phase)
        if self.wrap_warning is None:  # one per layer: a resumed run makes a new loader
            self.wrap_warning = WrapWarning(
                layer_label(self), f"image_data_param.source '{param.source}'",
                param.batch_size, self.shard,
            )  # fmt: skip
        self.wrap_warning.check(len(lines))
        loader = ImageLoader(lines, param, transformer, self.shard, True, layer_label(self))
        if param.rand_skip:
            skip = int(torch.randint(0, param.rand_skip, (1,), generator=transformer.generator))
            _log.info("Skipping first %d data points.", skip)
            loader.skip(skip)
        channels, height, width = transformer.output_shape(*loader.current_image().shape)
        top[0].reshape(param.batch_size, channels, height, width)
        top[1].reshape(param.batch_size)
        if root_solver():
            _log.info("output data size: %d,%d,%d,%d", param.batch_size, channels, height, width)
        return loader
