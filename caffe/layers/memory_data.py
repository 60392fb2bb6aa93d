"""MemoryData: batches cut from arrays handed over by pycaffe's Net.set_input_arrays.

`reset(data, labels, n)` keeps the caller's float32 arrays (data N×C×H×W matching
memory_data_param, labels with one value per item) and forward walks them batch by batch in
order, wrapping after the last; n must be a multiple of batch_size. Tops: data
(batch_size, channels, height, width) and label (batch_size).

As in Caffe, arrays given through reset() are NOT transformed: transform_param applies only
to Datum/image inputs, which pycaffe never passes to this layer. A transform_param here draws a
warning so that a prototxt written for it does not silently train on unscaled data.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from caffe.layer import Layer, register_layer

_log = logging.getLogger("caffe")


@register_layer("MemoryData")
class MemoryDataLayer(Layer):
    exact_num_bottom = 0
    exact_num_top = 2

    def setup(self, bottom, top):
        param = self.layer_param.memory_data_param
        self.batch_size = int(param.batch_size)
        self.item_shape = (int(param.channels), int(param.height), int(param.width))
        if self.batch_size <= 0 or 0 in self.item_shape:
            raise self.error(
                "batch_size, channels, height, and width must be specified and "
                "positive in memory_data_param"
            )
        if self.layer_param.HasField("transform_param"):
            _log.warning(
                "Layer '%s': MemoryData does not transform array data passed with "
                "set_input_arrays (as Caffe); transform_param is ignored",
                self.name,
            )
        self._data: np.ndarray | None = None
        self._labels: np.ndarray | None = None
        self._n = 0
        self._pos = 0

    def reshape(self, bottom, top):
        top[0].reshape(self.batch_size, *self.item_shape)
        top[1].reshape(self.batch_size)

    def reset(self, data: np.ndarray, labels: np.ndarray, n: int) -> None:
        """Use the first `n` items of `data` and `labels` from now on, starting at item 0."""
        if data.ndim != 4 or tuple(data.shape[1:]) != self.item_shape:
            raise self.error(
                f"data array has shape {data.shape}; expected N×"
                f"{'×'.join(map(str, self.item_shape))}"
            )
        n = int(n)
        if n <= 0 or n > data.shape[0] or labels.size < n:
            raise self.error(
                f"{n} items requested from a data array of {data.shape[0]} and "
                f"labels of {labels.size}"
            )
        if labels.size != labels.shape[0]:
            raise self.error(f"labels array must hold one value per item, got shape {labels.shape}")
        if n % self.batch_size:
            raise self.error(
                f"n must be a multiple of batch_size: {n} items for batches of {self.batch_size}"
            )
        self._data = data  # kept, not copied: later forwards see the caller's array (as Caffe)
        self._labels = labels.reshape(labels.shape[0], -1)[:, 0]
        self._n = n
        self._pos = 0

    def forward(self, bottom, top):
        if self._data is None:
            raise self.error("MemoryData needs data: call net.set_input_arrays(data, labels) first")
        rows = slice(self._pos, self._pos + self.batch_size)
        data = torch.from_numpy(np.array(self._data[rows], dtype=np.float32))
        labels = torch.from_numpy(np.array(self._labels[rows], dtype=np.float32))
        top[0].set_data(data.to(self.device))
        top[1].set_data(labels.to(self.device))
        self._pos = (self._pos + self.batch_size) % self._n
