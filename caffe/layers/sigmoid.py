"""Sigmoid: y = 1 / (1 + e^−x); dy/dx = y·(1 − y), so backward needs only the output."""

from __future__ import annotations

import torch

from caffe.layer import register_layer
from caffe.neuron_layer import NeuronLayer


@register_layer("Sigmoid")
class SigmoidLayer(NeuronLayer):
    keeps_input = False

    def activate(self, x):
        return torch.sigmoid(x)

    def gradient(self, x, y, dy):
        return torch.ops.aten.sigmoid_backward(dy, y)
