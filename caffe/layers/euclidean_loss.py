"""EuclideanLoss: Σ(a − b)² / (2N), N = the first dimension. Both inputs get gradients
(±(a − b)·w/N): unlike other losses, the second input is no label, so force_backward may
reach it too."""

from __future__ import annotations

import math

from caffe.layer import register_layer
from caffe.layers._loss import LossLayer


@register_layer("EuclideanLoss")
class EuclideanLossLayer(LossLayer):
    def allow_force_backward(self, bottom_index: int) -> bool:
        return True

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        dims = [math.prod(b.shape[1:]) for b in bottom]
        if dims[0] != dims[1]:
            raise self.error(f"inputs must have the same dimension: {bottom[0].shape} vs "
                             f"{bottom[1].shape}")  # fmt: skip

    def forward(self, bottom, top):
        a = bottom[0].data_tensor
        self._diff = a - bottom[1].data_tensor.reshape(a.shape)
        num = bottom[0].shape[0]
        top[0].set_data(self._diff.square().sum() / (2.0 * num))

    def backward(self, top, propagate_down, bottom):
        scale = top[0].diff_tensor / bottom[0].shape[0]
        for i, sign in ((0, 1.0), (1, -1.0)):
            if propagate_down[i]:
                grad = self._diff * (scale * sign)
                bottom[i].set_diff(grad.reshape(bottom[i].shape_tuple))
