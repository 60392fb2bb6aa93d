"""ReLU with Caffe's negative_slope (leaky ReLU); commonly in-place."""

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
        top[0].reshape(bottom[0].shape)

    def forward(self, bottom, top):
        x = bottom[0].data_tensor
        if self.negative_slope == 0:
            y = torch.relu(x)
        else:
            y = torch.where(x > 0, x, x * self.negative_slope)
        # Keep the output: its sign is the input's (slope >= 0), and unlike the blob it
        # cannot be replaced by a later in-place layer before backward runs.
        self._output = y
        top[0].set_data(y)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        y = self._output
        dy = top[0].diff_tensor
        if self.negative_slope == 0:
            dx = torch.ops.aten.threshold_backward(dy, y, 0)
        else:
            dx = torch.where(y > 0, dy, dy * self.negative_slope)
        bottom[0].set_diff(dx)
