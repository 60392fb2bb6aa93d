"""TanH: y = tanh(x); dy/dx = 1 − y², from the top's data at backward time (as Caffe: a
later in-place layer's values if one overwrote it)."""

from __future__ import annotations

import torch

from caffe.layer import register_layer
from caffe.layers._neuron import NeuronLayer


@register_layer("TanH")
class TanHLayer(NeuronLayer):
    keeps_input = False

    def activate(self, x, out):
        torch.tanh(x, out=out)

    def gradient(self, x, y, dy, out):
        torch.ops.aten.tanh_backward.grad_input(dy, y, grad_input=out)
