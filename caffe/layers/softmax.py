"""Softmax along `axis` (default 1, channels): y = e^(x − max) / Σ e^(x − max).

Backward: dx = y·(dy − Σ dy·y) along the axis, with y the top's data at backward time, as
Caffe reads it: a later in-place layer's values if one overwrote the blob."""

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
        x, y = bottom[0].data_tensor, top[0].data_tensor
        if y is x:  # in place: softmax reads a whole row before the row may be written
            y.copy_(torch.softmax(x, dim=self.axis))
        else:
            torch.softmax(x, dim=self.axis, out=y)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        y, dy, dx = top[0].data_tensor, top[0].diff_tensor, bottom[0].diff_tensor
        if dx is dy:  # in place
            dx.copy_(torch._softmax_backward_data(dy, y, self.axis, y.dtype))
        else:
            torch.ops.aten._softmax_backward_data.out(dy, y, self.axis, y.dtype, grad_input=dx)
