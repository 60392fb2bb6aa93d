"""HDF5Data: batches of rows read from HDF5 files (hdf5_data_param: source, batch_size, shuffle).

`source` is a text file listing one .h5 path per line. Every top reads the dataset named after
it; datasets of one file must share their first dimension (the rows). A file is loaded whole,
converted to float32, and walked row by row; after its last row the next listed file is loaded,
wrapping to the first. With `shuffle`, the file order is shuffled at every wrap and the row
order whenever a file is (re)loaded, from the layer's generator (seeded from torch's global
generator, so caffe.set_random_seed governs it). Top i has shape (batch_size, *dataset_i.shape[1:]).

Listed paths are used as written (relative to the working directory, as Caffe does); a relative
path that does not exist there is also looked up beside the list file.

Sharding as the Data layer (caffe/data/shard.py): in TRAIN with P solvers, this rank keeps the
row at running offset k iff k % P == its rank.
"""

from __future__ import annotations

import logging
import os

import h5py
import numpy as np
import torch

from caffe.common import root_solver
from caffe.data.prefetch import layer_label
from caffe.data.shard import WrapWarning, shard_for_phase
from caffe.data.transformer import seeded_generator
from caffe.layer import Layer, register_layer

_log = logging.getLogger("caffe")


def read_list_file(layer: Layer, source: str) -> list[str]:
    """Non-empty, stripped lines of a list file; errors name the layer and the file."""
    try:
        with open(source) as f:
            lines = [line.strip() for line in f]
    except OSError as e:
        raise layer.error(f"cannot read source list file '{source}': {e.strerror}") from None
    return [line for line in lines if line]


@register_layer("HDF5Data")
class HDF5DataLayer(Layer):
    exact_num_bottom = 0
    min_top = 1

    def setup(self, bottom, top):
        param = self.layer_param.hdf5_data_param
        self.batch_size = int(param.batch_size)
        if self.batch_size <= 0:
            raise self.error("hdf5_data_param.batch_size must be positive")
        if not param.source:
            raise self.error("hdf5_data_param.source is not set")
        listed = read_list_file(self, param.source)
        if not listed:
            raise self.error(f"Must have at least 1 HDF5 filename listed in {param.source}")
        here = os.path.dirname(os.path.abspath(param.source))
        self.files = [self._locate(path, here) for path in listed]
        if root_solver():
            _log.info("Number of HDF5 files: %d", len(self.files))
        self.shuffle = bool(param.shuffle)
        self.generator = seeded_generator()
        self.shard = shard_for_phase(self.phase)
        # The row count of the files is known once each has been loaded: at the first wrap.
        self.wrap_warning = WrapWarning(
            layer_label(self), f"hdf5_data_param.source '{param.source}'", self.batch_size,
            self.shard,
        )  # fmt: skip
        self.dataset_names = list(self.layer_param.top)
        self.file_order = self._permutation(len(self.files))
        self.current_file = 0
        self.current_row = 0
        self.offset = 0
        self.row_shapes: list[tuple[int, ...]] | None = None
        self._load(self.file_order[0])
        for blob, data in zip(top, self.datasets):
            blob.reshape(self.batch_size, *data.shape[1:])

    @staticmethod
    def _locate(path: str, list_dir: str) -> str:
        beside = os.path.join(list_dir, path)
        if not os.path.isabs(path) and not os.path.exists(path) and os.path.exists(beside):
            return beside
        return path

    def _permutation(self, n: int) -> np.ndarray:
        if self.shuffle:
            return torch.randperm(n, generator=self.generator).numpy()
        return np.arange(n)

    def _load(self, index: int) -> None:
        path = self.files[index]
        if root_solver():
            _log.info("Loading HDF5 file: %s", path)
        try:
            with h5py.File(path, "r") as f:
                self.datasets = [self._read_dataset(f, path, name) for name in self.dataset_names]
        except OSError as e:
            raise self.error(f"Failed opening HDF5 file: {path} ({e})") from None
        rows = {data.shape[0] for data in self.datasets}
        if len(rows) != 1:
            shapes = ", ".join(f"{n} {d.shape}" for n, d in zip(self.dataset_names, self.datasets))
            raise self.error(f"{path}: datasets have different numbers of rows: {shapes}")
        self.num_rows = rows.pop()
        if self.num_rows == 0:
            raise self.error(f"{path}: datasets have no rows")
        row_shapes = [data.shape[1:] for data in self.datasets]
        if self.row_shapes is not None and row_shapes != self.row_shapes:
            raise self.error(
                f"{path}: rows of shape {row_shapes} differ from the first file's "
                f"{self.row_shapes} (datasets {self.dataset_names})"
            )
        self.row_shapes = row_shapes
        self.row_order = self._permutation(self.num_rows)
        self._tensors = [torch.from_numpy(data) for data in self.datasets]  # the same memory

    def _read_dataset(self, f: h5py.File, path: str, name: str) -> np.ndarray:
        if name not in f:
            raise self.error(f"{path} has no dataset '{name}' (datasets are named after tops)")
        dataset = f[name]
        if not isinstance(dataset, h5py.Dataset) or dataset.dtype.kind not in "fiub":
            raise self.error(f"{path}: '{name}' is not a numeric dataset")
        if dataset.ndim < 1:
            raise self.error(f"{path}: dataset '{name}' needs at least one axis (the rows)")
        return np.asarray(dataset, dtype=np.float32)

    def _advance(self) -> None:
        self.current_row += 1
        if self.current_row == self.num_rows:
            if self.current_file == len(self.files) - 1:
                self.wrap_warning.check(self.offset + 1)  # rows passed in the first pass
            if len(self.files) > 1:
                self.current_file += 1
                if self.current_file == len(self.files):
                    self.current_file = 0
                    self.file_order = self._permutation(len(self.files))
                    if root_solver():
                        _log.info("Looping around to first file.")
                self._load(self.file_order[self.current_file])
            elif self.shuffle:
                self.row_order = self._permutation(self.num_rows)
            self.current_row = 0
        self.offset += 1

    def reshape(self, bottom, top):
        """Shapes are fixed at setup (every file must match the first)."""

    def forward(self, bottom, top):
        start, n = self.current_row, self.batch_size
        if self.shard.count == 1 and start + n <= self.num_rows:
            # The batch is the next n rows of the file in memory: one copy per top, then the
            # walk advances n rows (the last step of which may load the next file).
            index = torch.from_numpy(self.row_order[start : start + n]) if self.shuffle else None
            for blob, data in zip(top, self._tensors):
                rows = data[start : start + n] if index is None else data.index_select(0, index)
                blob.data_tensor.copy_(rows)
            self.current_row += n - 1
            self.offset += n - 1
            self._advance()
            return
        batches = [np.empty(blob.shape, dtype=np.float32) for blob in top]
        for item in range(n):
            while not self.shard.keeps(self.offset):
                self._advance()
            row = self.row_order[self.current_row]
            for batch, data in zip(batches, self.datasets):
                batch[item] = data[row]
            self._advance()
        for blob, batch in zip(top, batches):
            blob.set_data(torch.from_numpy(batch).to(self.device))
