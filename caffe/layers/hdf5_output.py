"""HDF5Output: writes its two bottoms to hdf5_output_param.file_name as datasets "data" and
"label" (Caffe's names), float32, in Caffe's legacy 4-D shape (num, channels, height, width).

The file is created (truncated) at setup. Caffe could save only one batch (a second forward
tried to create the datasets again); here each forward appends its rows, so after k forwards
the datasets hold k batches. The file is opened and closed around every write, so it is
complete and readable between forwards.
"""

from __future__ import annotations

import logging

import h5py
import numpy as np

from caffe.layer import Layer, register_layer

_log = logging.getLogger("caffe")
_DATASETS = ("data", "label")


def _legacy_shape(shape: list[int]) -> tuple[int, ...]:
    """Caffe's num/channels/height/width view (missing trailing axes read as 1)."""
    if len(shape) > 4:
        return tuple(shape)
    return tuple(shape) + (1,) * (4 - len(shape))


@register_layer("HDF5Output")
class HDF5OutputLayer(Layer):
    exact_num_bottom = 2
    exact_num_top = 0

    def setup(self, bottom, top):
        self.file_name = self.layer_param.hdf5_output_param.file_name
        if not self.file_name:
            raise self.error("hdf5_output_param.file_name is not set")
        try:
            h5py.File(self.file_name, "w").close()
        except OSError as e:
            raise self.error(
                f"Failed to open HDF5 file {self.file_name} for writing: {e}"
            ) from None

    def reshape(self, bottom, top):
        if bottom[0].shape[:1] != bottom[1].shape[:1]:
            raise self.error(
                f"data and label must have the same number of rows: "
                f"{bottom[0].shape_string()} vs {bottom[1].shape_string()}"
            )

    def forward(self, bottom, top):
        rows = bottom[0].shape[0] if bottom[0].shape else 1
        try:
            with h5py.File(self.file_name, "a") as f:
                for name, blob in zip(_DATASETS, bottom):
                    values = blob.data_tensor.detach().cpu().numpy().astype(np.float32)
                    values = values.reshape(_legacy_shape(blob.shape))
                    self._append(f, name, values)
        except OSError as e:
            raise self.error(f"Failed to write HDF5 file {self.file_name}: {e}") from None
        _log.info("Successfully saved %d rows", rows)

    def _append(self, f: h5py.File, name: str, values: np.ndarray) -> None:
        if name not in f:
            f.create_dataset(name, data=values, maxshape=(None, *values.shape[1:]), chunks=True)
            return
        dataset = f[name]
        if dataset.shape[1:] != values.shape[1:]:
            raise self.error(
                f"{self.file_name}: '{name}' rows changed shape from "
                f"{dataset.shape[1:]} to {values.shape[1:]}"
            )
        start = dataset.shape[0]
        dataset.resize(start + values.shape[0], axis=0)
        dataset[start:] = values

    def backward(self, top, propagate_down, bottom):
        """An output: nothing flows back."""
