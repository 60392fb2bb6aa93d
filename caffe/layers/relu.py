"""ReLU with Caffe's negative_slope (leaky ReLU); commonly in-place.

Forward writes into the top's memory; backward reads the bottom's data at backward time,
as Caffe does: out of place that is x, in place it is the blob's current values (y, whose
sign is x's for slope >= 0, or what a later in-place layer left there).
"""

from __future__ import annotations

import torch

from caffe.layer import Layer, register_layer


@register_layer("ReLU")
class ReLULayer(Layer):
    exact_num_bottom = 1
    exact_num_top = 1

    def setup(self, bottom, top):
        self.negative_slope = self.layer_param.relu_param.negative_slope

    def reshape(self, bottom, top):
        top[0].reshape(bottom[0].shape_tuple)

    def forward(self, bottom, top):
        x, y = bottom[0].data_tensor, top[0].data_tensor
        if self.negative_slope == 0:
            torch.clamp_min(x, 0, out=y)
        else:
            torch.where(x > 0, x, x * self.negative_slope, out=y)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x, dy, dx = bottom[0].data_tensor, top[0].diff_tensor, bottom[0].diff_tensor
        if self.negative_slope == 0:
            torch.ops.aten.threshold_backward.grad_input(dy, x, 0, grad_input=dx)
        else:
            torch.where(x > 0, dy, dy * self.negative_slope, out=dx)
