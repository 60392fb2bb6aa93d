"""Flatten: merge axes axis..end_axis into one; the top shares the bottom's memory."""

from __future__ import annotations

import math

from caffe.layer import Layer, register_layer


@register_layer("Flatten")
class FlattenLayer(Layer):
    exact_num_bottom = 1
    exact_num_top = 1

    def setup(self, bottom, top):
        if top[0] is bottom[0]:
            raise self.error("Flatten layer does not allow in-place computation.")

    def reshape(self, bottom, top):
        p = self.layer_param.flatten_param
        shape = bottom[0].shape
        try:
            start = bottom[0].canonical_axis(p.axis)
            end = bottom[0].canonical_axis(p.end_axis)
        except ValueError as exc:
            raise self.error(f"flatten_param: {exc}") from None
        if end < start:
            raise self.error(f"end_axis {p.end_axis} comes before axis {p.axis} in bottom {shape}")
        top[0].reshape([*shape[:start], math.prod(shape[start : end + 1]), *shape[end + 1 :]])
        top[0].share_data(bottom[0])  # one memory, as Caffe's ShareData/ShareDiff
        top[0].share_diff(bottom[0])

    def forward(self, bottom, top):
        """The top is the bottom's memory: nothing to compute."""

    def backward(self, top, propagate_down, bottom):
        """The top's diff is the bottom's: nothing to compute."""
