"""BatchReindex: top = bottom[0][bottom[1]], items of the batch picked (and repeated) by index.

bottom[1] is a 1-D blob of M indices into bottom[0]'s first axis; the top is M × (the rest of
bottom[0]'s shape). Indices are floats, as every blob: each must be >= 0 and < N, and is
truncated to an integer (Caffe's static_cast<int>). Backward sums the top diff of every
occurrence of an index into that item (repeated indices accumulate; items never picked get 0).
There is no gradient for the indices.
"""

from __future__ import annotations

import torch

from caffe.layer import Layer, register_layer


@register_layer("BatchReindex")
class BatchReindexLayer(Layer):
    exact_num_bottom = 2
    exact_num_top = 1

    def reshape(self, bottom, top):
        if bottom[1].num_axes != 1:
            raise self.error(f"the index bottom must be 1-D; it has shape {bottom[1].shape}")
        if bottom[0].num_axes < 1:
            raise self.error("the data bottom must have a batch axis")
        top[0].reshape([bottom[1].shape[0], *bottom[0].shape[1:]])

    def _indices(self, bottom) -> torch.Tensor:
        values = bottom[1].data_tensor
        num = bottom[0].shape[0]
        bad = ~((values >= 0) & (values < num))  # NaN is bad too
        if bool(bad.any()):
            raise self.error(
                f"index {float(values[bad][0])} is outside the batch [0, {num}) of bottom "
                f"{bottom[0].shape}"
            )
        return values.long()  # truncation toward zero, as static_cast<int>

    def forward(self, bottom, top):
        index = self._indices(bottom)
        top[0].set_data(bottom[0].data_tensor.index_select(0, index))

    def backward(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error("Cannot backprop to index.")
        if not propagate_down[0]:
            return
        index = self._indices(bottom)
        dx = torch.zeros_like(bottom[0].data_tensor)
        dx.index_add_(0, index, top[0].diff_tensor)
        bottom[0].set_diff(dx)
