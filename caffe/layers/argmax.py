"""ArgMax: the indices (or with out_max_val, the values) of the top_k largest inputs.

With `axis`: along that axis, the top's axis size becoming top_k; out_max_val gives the
values only. Without `axis`: over each item's flattened features, the top shaped
(N, 1, top_k) - or (N, 2, top_k) with indices then values when out_max_val - padded with
1s to the bottom's number of axes (at least 3). Equal values rank the larger index first,
as Caffe's sort of (value, index) pairs does. ArgMax has no gradient.
"""

from __future__ import annotations

import math

import torch

from caffe.layer import Layer, register_layer


@register_layer("ArgMax")
class ArgMaxLayer(Layer):
    exact_num_bottom = 1
    exact_num_top = 1

    def allow_force_backward(self, bottom_index: int) -> bool:
        return False  # no gradient to force

    def setup(self, bottom, top):
        p = self.layer_param.argmax_param
        self.out_max_val = p.out_max_val
        self.top_k = int(p.top_k)
        self.has_axis = p.HasField("axis")
        if self.top_k < 1:
            raise self.error("argmax_param.top_k must be at least 1")

    def reshape(self, bottom, top):
        shape = bottom[0].shape
        if self.has_axis:
            try:
                self.axis = bottom[0].canonical_axis(self.layer_param.argmax_param.axis)
            except ValueError as e:
                raise self.error(f"argmax_param.axis: {e}") from None
            classes = shape[self.axis]
            top_shape = list(shape)
            top_shape[self.axis] = self.top_k
        else:
            classes = math.prod(shape[1:])
            top_shape = [1] * max(len(shape), 3)
            top_shape[0] = shape[0]
            top_shape[1] = 2 if self.out_max_val else 1
            top_shape[2] = self.top_k
        if self.top_k > classes:
            raise self.error(f"top_k ({self.top_k}) must be less than or equal to the number "
                             f"of classes ({classes})")  # fmt: skip
        top[0].reshape(top_shape)

    def forward(self, bottom, top):
        x = bottom[0].data_tensor
        if self.has_axis:
            values, indices = self._top_k(x.movedim(self.axis, -1))
            out = values if self.out_max_val else indices.to(x.dtype)
            out = out.movedim(-1, self.axis)
        else:
            values, indices = self._top_k(x.reshape(x.shape[0], -1))
            parts = [indices.to(x.dtype)] + ([values] if self.out_max_val else [])
            out = torch.stack(parts, dim=1)
        top[0].set_data(out.reshape(top[0].shape_tuple))

    def _top_k(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-k along the last dim; ties: larger index first (stable sort of the reversal)."""
        last = x.shape[-1] - 1
        values, reversed_index = torch.sort(x.flip(-1), dim=-1, descending=True, stable=True)
        return values[..., : self.top_k], last - reversed_index[..., : self.top_k]

    def backward(self, top, propagate_down, bottom):
        if any(propagate_down):
            raise self.error("ArgMax has no backward")
