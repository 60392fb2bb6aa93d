"""Swish: y = x·sigmoid(β·x); dy/dx = β·y + sigmoid(β·x)·(1 − β·y)."""

from __future__ import annotations

import torch

from caffe.layer import register_layer
from caffe.neuron_layer import NeuronLayer


@register_layer("Swish")
class SwishLayer(NeuronLayer):
    def setup(self, bottom, top):
        self.beta = float(self.layer_param.swish_param.beta)

    def activate(self, x):
        return x * torch.sigmoid(x * self.beta)

    def gradient(self, x, y, dy):
        gate = torch.sigmoid(x * self.beta)
        beta_y = y * self.beta
        return dy * (beta_y + gate * (1 - beta_y))
