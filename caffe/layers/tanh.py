"""TanH: y = tanh(x); dy/dx = 1 − y², so backward needs only the output."""

from __future__ import annotations

import torch

from caffe.layer import register_layer
from caffe.neuron_layer import NeuronLayer


@register_layer("TanH")
class TanHLayer(NeuronLayer):
    keeps_input = False

    def activate(self, x):
        return torch.tanh(x)

    def gradient(self, x, y, dy):
        return torch.ops.aten.tanh_backward(dy, y)
