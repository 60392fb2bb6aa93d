"""Swish: y = x·sigmoid(β·x); dy/dx = β·y + sigmoid(β·x)·(1 − β·y).

As Caffe, forward keeps sigmoid(β·x) and backward reads y from the top's data at backward
time (a later in-place layer's values if one overwrote it); the input itself is not needed.
"""

from __future__ import annotations

import torch

from caffe.layer import register_layer
from caffe.layers._neuron import NeuronLayer


@register_layer("Swish")
class SwishLayer(NeuronLayer):
    keeps_input = False

    def setup(self, bottom, top):
        self.beta = float(self.layer_param.swish_param.beta)

    def activate(self, x, out):
        self._gate = torch.sigmoid(x * self.beta)
        torch.mul(x, self._gate, out=out)

    def gradient(self, x, y, dy, out):
        beta_y = y * self.beta
        torch.mul(dy, beta_y.add_(self._gate * (1 - beta_y)), out=out)
