"""BNLL (binomial normal log likelihood): y = log(1 + e^x), computed without overflow.

dy/dx = sigmoid(x), from the input as Caffe computes it (e^x / (e^x + 1)); in place a copy
of the input is kept (Caffe would read the overwritten values there).
"""

from __future__ import annotations

import torch

from caffe.layer import register_layer
from caffe.layers._neuron import NeuronLayer


@register_layer("BNLL")
class BNLLLayer(NeuronLayer):
    def activate(self, x, out):
        # logaddexp(x, 0) = max(x, 0) + log1p(e^−|x|): stable for any x.
        torch.logaddexp(x, torch.zeros((), dtype=x.dtype, device=x.device), out=out)

    def gradient(self, x, y, dy, out):
        torch.mul(dy, torch.sigmoid(x), out=out)
