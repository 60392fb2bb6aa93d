"""Softmax along `axis` (default 1, channels): y = e^(x − max) / Σ e^(x − max).

Backward: dx = y·(dy − Σ dy·y) along the axis, from the output kept at forward (the blob
itself may hold a later in-place layer's output by then)."""

from __future__ import annotations

import torch

from caffe.layer import Layer, register_layer


@register_layer("Softmax")
class SoftmaxLayer(Layer):
    exact_num_bottom = 1
    exact_num_top = 1

    def reshape(self, bottom, top):
        try:
            self.axis = bottom[0].canonical_axis(self.layer_param.softmax_param.axis)
        except ValueError as e:
            raise self.error(f"softmax_param.axis: {e}") from None
        top[0].reshape(bottom[0].shape)

    def forward(self, bottom, top):
        self._output = torch.softmax(bottom[0].data_tensor, dim=self.axis)
        top[0].set_data(self._output)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        y = self._output
        dx = torch._softmax_backward_data(top[0].diff_tensor, y, self.axis, y.dtype)
        bottom[0].set_diff(dx)
