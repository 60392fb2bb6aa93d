"""Sigmoid: y = 1 / (1 + e^−x); dy/dx = y·(1 − y), from the top's data at backward time
(as Caffe: a later in-place layer's values if one overwrote it)."""

from __future__ import annotations

import torch

from caffe.layer import register_layer
from caffe.layers._neuron import NeuronLayer


@register_layer("Sigmoid")
class SigmoidLayer(NeuronLayer):
    keeps_input = False

    def activate(self, x, out):
        torch.sigmoid(x, out=out)

    def gradient(self, x, y, dy, out):
        torch.ops.aten.sigmoid_backward.grad_input(dy, y, grad_input=out)
